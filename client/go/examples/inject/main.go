// Inject from Go: create a store, remember a fact, and fold it into a user's turn.
//
//	make run                                   # the service, on localhost:50051
//	go run ./examples/inject                   # in client/go (CONTEXTFOLD_ADDRESS to point elsewhere)
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/protobuf/proto"

	contextfold "contextfold.dev/go"
	contextfoldv1 "contextfold.dev/go/gen/contextfold/v1"
)

func main() {
	cf, err := contextfold.Dial(contextfold.Options{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cf.Close()
	ctx := context.Background()

	store := fmt.Sprintf("go-example-%d", time.Now().UnixNano())
	if _, err := cf.Memory.CreateStore(ctx, &contextfoldv1.CreateStoreRequest{Store: &contextfoldv1.Store{Name: store}}); err != nil {
		log.Fatal(err)
	}
	_, err = cf.Memory.AddMemories(ctx, &contextfoldv1.AddMemoriesRequest{
		Store:    store,
		Memories: []*contextfoldv1.Memory{{Content: "User prefers dark mode in every editor", UserId: "ada"}},
	})
	if err != nil {
		log.Fatal(err)
	}

	messages := []contextfold.Message{contextfold.UserMessage("Set up my new editor, please.")}
	result, err := cf.Inject(ctx, messages, &contextfoldv1.InjectRequest{
		Memory: &contextfoldv1.MemoryOptions{
			Stores:     []string{store},
			MaxEntries: proto.Int32(3),
			Scope:      &contextfoldv1.Scope{UserId: "ada"},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("injected: %v (%d entries)\n", result.Report.GetInjected(), len(result.Report.GetEntries()))
	// Keep result.Messages (injected blocks included) as the agent's history; send the model:
	for _, block := range contextfold.ForModel(result.Messages)[0].Content {
		fmt.Printf("%q\n", block["text"])
	}

	if _, err := cf.Memory.DeleteStore(ctx, &contextfoldv1.DeleteStoreRequest{Name: store, Force: true}); err != nil {
		log.Fatal(err)
	}
}
