// The Go client against a live contextfold server (tests/test_go.py starts it and runs these):
// CONTEXTFOLD_ADDRESS is an open server; CONTEXTFOLD_KEYED_ADDRESS one that requires keys, and
// CONTEXTFOLD_TEST_KEY a key it accepts.
package contextfold_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	contextfold "contextfold.dev/go"
	contextfoldv1 "contextfold.dev/go/gen/contextfold/v1"
)

func unique(prefix string) string {
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(suffix)
}

func dial(t *testing.T, options contextfold.Options) *contextfold.Client {
	t.Helper()
	cf, err := contextfold.Dial(options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cf.Close() })
	return cf
}

// store creates a store holding the given entries (id: content; none, an empty store) and returns its name;
// the store and its entries are deleted when the test ends.
func store(t *testing.T, cf *contextfold.Client, entries map[string]string) string {
	t.Helper()
	ctx := context.Background()
	name := unique("go")
	if _, err := cf.Memory.CreateStore(ctx, &contextfoldv1.CreateStoreRequest{Store: &contextfoldv1.Store{Name: name}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := cf.Memory.DeleteStore(context.Background(), &contextfoldv1.DeleteStoreRequest{Name: name, Force: true})
		if err != nil {
			t.Errorf("deleting store %s: %v", name, err)
		}
	})
	var memories []*contextfoldv1.Memory
	for id, content := range entries {
		memories = append(memories, &contextfoldv1.Memory{Id: id, Content: content})
	}
	if len(memories) == 0 {
		return name
	}
	if _, err := cf.Memory.AddMemories(ctx, &contextfoldv1.AddMemoriesRequest{Store: name, Memories: memories}); err != nil {
		t.Fatal(err)
	}
	return name
}

func injectedIDs(report *contextfoldv1.InjectionReport) []string {
	var ids []string
	for _, entry := range report.GetEntries() {
		ids = append(ids, entry.GetId())
	}
	return ids
}

func TestInjectFoldsMemoryIntoConverseMessagesAndSkipsWhatTheHistoryHolds(t *testing.T) {
	cf := dial(t, contextfold.Options{})
	prefix := unique("entry")
	name := store(t, cf, map[string]string{
		prefix + "-dark":  "User prefers dark mode in every editor",
		prefix + "-theme": "User likes the Solarized theme",
		prefix + "-dog":   "User's dog is called Pixel",
	})
	settings := &contextfoldv1.InjectRequest{
		Memory: &contextfoldv1.MemoryOptions{Stores: []string{name}, MaxEntries: proto.Int32(2)},
	}
	messages := []contextfold.Message{contextfold.UserMessage("Which colour theme should my editor use?")}

	first, err := cf.Inject(context.Background(), messages, settings)
	if err != nil {
		t.Fatal(err)
	}
	ids := injectedIDs(first.Report)
	if !first.Report.GetInjected() || !reflect.DeepEqual(ids, []string{prefix + "-dark", prefix + "-theme"}) &&
		!reflect.DeepEqual(ids, []string{prefix + "-theme", prefix + "-dark"}) {
		t.Fatalf("injected %v (%s), want the two editor entries", ids, first.Report.GetDetail())
	}
	content := first.Messages[0].Content
	if len(content) != 2 || content[0]["text"] != "Which colour theme should my editor use?" {
		t.Fatalf("folded message %v", content)
	}
	injected := content[1]["injected"].(map[string]interface{})
	if injected["source"] != "memory" || !reflect.DeepEqual(injected["entryIds"], ids) {
		t.Fatalf("injected block %v, report %v", injected, ids)
	}
	shown := contextfold.ForModel(first.Messages)[0].Content[1]
	text, _ := shown["text"].(string)
	if len(shown) != 1 || !strings.HasPrefix(text, "\n\n") || !strings.Contains(text, "Solarized") {
		t.Fatalf("the model sees %q", shown)
	}

	// The agent keeps the injected block in its history: the next turn gets the entry left.
	history := append(first.Messages,
		contextfold.Message{Role: "assistant", Content: []contextfold.Block{contextfold.Text("Solarized dark.")}},
		contextfold.UserMessage("And what do you know about my dog and my editor theme?"))
	second, err := cf.Inject(context.Background(), history, settings)
	if err != nil {
		t.Fatal(err)
	}
	if got := injectedIDs(second.Report); !reflect.DeepEqual(got, []string{prefix + "-dog"}) {
		t.Fatalf("second turn injected %v, want only the entry not yet shown", got)
	}
}

func TestAReplayedQuestionReadsItsDaysAgainstWhenItWasAsked(t *testing.T) {
	cf := dial(t, contextfold.Options{})
	ctx := context.Background()
	prefix := unique("decision")
	name := store(t, cf, nil)
	decided := map[string]string{
		"2023-05-02": "We agreed to move the release to a blue-green rollout.",
		"2023-05-09": "We agreed to freeze the release branch until the audit ends.",
	}
	var memories []*contextfoldv1.Memory
	for day, content := range decided {
		metadata, err := structpb.NewStruct(map[string]interface{}{"date": day})
		if err != nil {
			t.Fatal(err)
		}
		memories = append(memories, &contextfoldv1.Memory{Id: prefix + "-" + day, Content: content, Metadata: metadata})
	}
	if _, err := cf.Memory.AddMemories(ctx, &contextfoldv1.AddMemoriesRequest{Store: name, Memories: memories}); err != nil {
		t.Fatal(err)
	}
	messages := []contextfold.Message{contextfold.UserMessage("What did we agree about the release yesterday?")}
	settings := &contextfoldv1.InjectRequest{
		Memory: &contextfoldv1.MemoryOptions{
			Stores:    []string{name},
			AskedTime: timestamppb.New(time.Date(2023, 5, 10, 9, 0, 0, 0, time.UTC)),
		},
		Explain: true,
	}
	replayed, err := cf.Inject(ctx, messages, settings)
	if err != nil {
		t.Fatal(err)
	}
	if ids := injectedIDs(replayed.Report); len(ids) == 0 || ids[0] != prefix+"-2023-05-09" {
		t.Fatalf("injected %v (%s), want the decision of the day before first", ids, replayed.Report.GetDetail())
	}
	var dated []string
	for _, candidate := range replayed.Report.GetCandidates() {
		if candidate.GetInputs()["date"] == 1 {
			dated = append(dated, candidate.GetId())
		}
	}
	if !reflect.DeepEqual(dated, []string{prefix + "-2023-05-09"}) {
		t.Fatalf("dated %v, want only the decision of the day before the question was asked", dated)
	}
}

func TestEveryKindOfBlockComesBackAsItWasSent(t *testing.T) {
	cf := dial(t, contextfold.Options{})
	var messages []contextfold.Message
	conversation := `[
	  {"role": "user", "content": [{"text": "Look at this"}, {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}, {"cachePoint": {"type": "default"}}]},
	  {"role": "assistant", "content": [{"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}, {"toolUse": {"toolUseId": "t1", "name": "clock", "input": {"zone": "UTC", "precise": 12345678901234567890}}}]},
	  {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "12:00"}]}}, {"toolResult": {"toolUseId": "t2", "content": [{"json": {"n": 1.5}}]}}]}
	]`
	// Numbers as written (json.Number), as an application that keeps them exact reads them.
	decoder := json.NewDecoder(strings.NewReader(conversation))
	decoder.UseNumber()
	if err := decoder.Decode(&messages); err != nil {
		t.Fatal(err)
	}
	result, err := cf.Inject(context.Background(), messages, &contextfoldv1.InjectRequest{
		Trigger: contextfoldv1.Trigger_TRIGGER_EVERY_TURN,
		Memory:  &contextfoldv1.MemoryOptions{MaxEntries: proto.Int32(0)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if result.Report.GetSkipReason() != contextfoldv1.SkipReason_SKIP_REASON_DISABLED {
		t.Fatalf("report %v", result.Report)
	}
	sent, _ := json.Marshal(messages)
	got, _ := json.Marshal(result.Messages)
	var sentValue, gotValue interface{}
	if err := json.Unmarshal(sent, &sentValue); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &gotValue); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sentValue, gotValue) {
		t.Fatalf("sent %s\ngot  %s", sent, got)
	}
	if !strings.Contains(string(got), "12345678901234567890") {
		t.Fatalf("a tool input's integer lost digits: %s", got)
	}
}

func TestAnErrorCarriesItsStatusAndDetails(t *testing.T) {
	cf := dial(t, contextfold.Options{})
	_, err := cf.Memory.SearchMemories(context.Background(), &contextfoldv1.SearchMemoriesRequest{Query: "  "})
	var invalid *contextfold.Error
	if !errors.As(err, &invalid) || invalid.Code != codes.InvalidArgument || len(invalid.FieldViolations) != 1 ||
		invalid.FieldViolations[0].Field != "query" || invalid.FieldViolations[0].Description == "" {
		t.Fatalf("error %#v", err)
	}
	if !strings.HasPrefix(invalid.Error(), "contextfold: INVALID_ARGUMENT: ") || !strings.Contains(invalid.Error(), " (query: ") {
		t.Fatalf("message %q", invalid.Error())
	}

	missing := unique("missing")
	_, err = cf.Memory.GetMemory(context.Background(), &contextfoldv1.GetMemoryRequest{Id: missing})
	var notFound *contextfold.Error
	if !errors.As(err, &notFound) || notFound.Code != codes.NotFound ||
		!reflect.DeepEqual(notFound.Resource, &contextfold.Resource{Type: "memory", Name: missing}) {
		t.Fatalf("error %#v", err)
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("status.Code(err) = %v", status.Code(err))
	}

	id := unique("entry")
	name := store(t, cf, map[string]string{id: "User prefers dark mode"})
	_, err = cf.Memory.UpdateMemory(context.Background(), &contextfoldv1.UpdateMemoryRequest{
		Memory: &contextfoldv1.Memory{Id: id, Store: name, Content: "User prefers light mode", Etag: "1.999"},
	})
	var aborted *contextfold.Error
	if !errors.As(err, &aborted) || aborted.Code != codes.Aborted || aborted.Reason != "ETAG_MISMATCH" {
		t.Fatalf("error %#v", err)
	}

	// A stream's error is decoded too.
	stream, err := cf.Memory.ExportMemories(context.Background(), &contextfoldv1.ExportMemoriesRequest{Stores: []string{unique("absent")}})
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = stream.Recv()
	}
	var streamErr *contextfold.Error
	if err == io.EOF || !errors.As(err, &streamErr) || streamErr.Code != codes.NotFound || streamErr.Resource == nil {
		t.Fatalf("stream error %#v", err)
	}
}

func TestTheClientTimeoutAppliesUnlessTheContextHasADeadline(t *testing.T) {
	hurried := dial(t, contextfold.Options{Timeout: time.Microsecond})
	search := &contextfoldv1.SearchMemoriesRequest{Query: "what theme does the user like?"}
	_, err := hurried.Memory.SearchMemories(context.Background(), search)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("with a 1 µs timeout: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := hurried.Memory.SearchMemories(ctx, search); err != nil {
		t.Fatalf("with the context's own deadline: %v", err)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	listener.Close()
	return address
}

// relay accepts on address and pipes every connection to the live server, as a replica coming
// back would; it stops with the test.
func relay(t *testing.T, address, server string) {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		t.Error(err)
		return
	}
	t.Cleanup(func() { listener.Close() })
	go func() {
		for {
			client, err := listener.Accept()
			if err != nil {
				return
			}
			upstream, err := net.Dial("tcp", server)
			if err != nil {
				client.Close()
				continue
			}
			go func() { io.Copy(upstream, client); upstream.Close() }()
			go func() { io.Copy(client, upstream); client.Close() }()
		}
	}()
}

func TestACallThatOnlyReadsIsTriedAgainWhenTheConnectionFailsItAWriteIsNot(t *testing.T) {
	if !contextfold.SafeToRepeat("/contextfold.v1.InjectionService/Inject") || contextfold.SafeToRepeat("/contextfold.v1.MemoryService/CreateStore") {
		t.Fatal("the read-only methods are not read from the protos")
	}
	// Nothing listens at first; once a ListStores attempt has failed, a relay to the live server
	// opens there.
	address := closedPort(t)
	var mu sync.Mutex
	var attempts []string
	opened := false
	recording := func(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		attempts = append(attempts, method[strings.LastIndex(method, "/")+1:])
		mu.Unlock()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && strings.HasSuffix(method, "/ListStores") && !opened {
			opened = true
			relay(t, address, os.Getenv("CONTEXTFOLD_ADDRESS"))
		}
		return err
	}
	cf := dial(t, contextfold.Options{Address: address, DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(recording)}})

	_, err := cf.Memory.CreateStore(context.Background(), &contextfoldv1.CreateStoreRequest{Store: &contextfoldv1.Store{Name: unique("never")}})
	if status.Code(err) != codes.Unavailable || !reflect.DeepEqual(attempts, []string{"CreateStore"}) {
		t.Fatalf("a write: %v after %v", err, attempts)
	}
	if _, err := cf.Memory.ListStores(context.Background(), &contextfoldv1.ListStoresRequest{}); err != nil {
		t.Fatalf("a read: %v after %v", err, attempts)
	}
	if len(attempts) < 3 || attempts[1] != "ListStores" || attempts[len(attempts)-1] != "ListStores" {
		t.Fatalf("attempts %v", attempts)
	}

	// A deadline ends the retries.
	down := dial(t, contextfold.Options{Address: closedPort(t), Timeout: 60 * time.Millisecond})
	started := time.Now()
	if _, err := down.Memory.GetMemory(context.Background(), &contextfoldv1.GetMemoryRequest{Id: "x"}); err == nil {
		t.Fatal("a server that is down answered")
	}
	if elapsed := time.Since(started); elapsed > time.Second {
		t.Fatalf("gave up after %v", elapsed)
	}
}

func TestTheAPIKeyGoesWithEveryCall(t *testing.T) {
	address, key := os.Getenv("CONTEXTFOLD_KEYED_ADDRESS"), os.Getenv("CONTEXTFOLD_TEST_KEY")
	if address == "" || key == "" {
		t.Fatal("CONTEXTFOLD_KEYED_ADDRESS and CONTEXTFOLD_TEST_KEY name a server that requires keys")
	}
	list := &contextfoldv1.ListStoresRequest{}
	if _, err := dial(t, contextfold.Options{Address: address}).Memory.ListStores(context.Background(), list); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a key: %v", err)
	}
	if _, err := dial(t, contextfold.Options{Address: address, APIKey: key}).Memory.ListStores(context.Background(), list); err != nil {
		t.Fatalf("with the key: %v", err)
	}
	t.Setenv("CONTEXTFOLD_API_KEY", key)
	if _, err := dial(t, contextfold.Options{Address: address}).Memory.ListStores(context.Background(), list); err != nil {
		t.Fatalf("with CONTEXTFOLD_API_KEY: %v", err)
	}
}

func TestAnAPIKeyThatCannotBeAHeaderIsRefusedByDialNamingWhereItCameFrom(t *testing.T) {
	_, err := contextfold.Dial(contextfold.Options{APIKey: "cfk_…"})
	if err == nil || !strings.HasPrefix(err.Error(), "contextfold: the API key from Options.APIKey holds '…' (U+2026) at position 4") {
		t.Fatalf("placeholder: %v", err)
	}
	t.Setenv("CONTEXTFOLD_API_KEY", "cfk_1234\t5678")
	_, err = contextfold.Dial(contextfold.Options{})
	if err == nil || !strings.Contains(err.Error(), "from CONTEXTFOLD_API_KEY holds U+0009 at position 8") {
		t.Fatalf("a tab: %v", err)
	}
	if problem := contextfold.KeyProblem("<your key>"); !strings.HasPrefix(problem, "looks like a placeholder") {
		t.Fatalf("angle brackets: %q", problem)
	}
}

// Run by tests/test_replicas.py against a server with a read replica whose replay it has paused
// (CONTEXTFOLD_REPLICATED=1); elsewhere there is no replica to read from.
func TestAClientReadsItsOwnWritesWhileTheReplicaLags(t *testing.T) {
	if os.Getenv("CONTEXTFOLD_REPLICATED") != "1" {
		t.Skip("needs a server with a paused read replica (tests/test_replicas.py)")
	}
	cf := dial(t, contextfold.Options{})
	id := unique("moved")
	name := store(t, cf, map[string]string{id: "The office moved to Porto"})
	question := []contextfold.Message{contextfold.UserMessage("Where is the office now?")}
	mine, err := cf.Inject(context.Background(), question, &contextfoldv1.InjectRequest{
		Memory: &contextfoldv1.MemoryOptions{Stores: []string{name}, MaxEntries: proto.Int32(10)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if mine.Report.GetDatabase() != "primary" || !reflect.DeepEqual(injectedIDs(mine.Report), []string{id}) {
		t.Fatalf("the writer read from %q: %v", mine.Report.GetDatabase(), injectedIDs(mine.Report))
	}
	theirs, err := dial(t, contextfold.Options{}).Memory.SearchMemories(context.Background(),
		&contextfoldv1.SearchMemoriesRequest{Query: "where is the office now", MaxResults: 10})
	if err != nil {
		t.Fatal(err)
	}
	if theirs.GetDatabase() != "replica-1" {
		t.Fatalf("another client read from %q", theirs.GetDatabase())
	}
	for _, result := range theirs.GetResults() {
		if result.GetMemory().GetId() == id {
			t.Fatal("the replica had the entry its replay was paused before")
		}
	}
}
