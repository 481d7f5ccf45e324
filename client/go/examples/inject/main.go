// Inject from Go: fold what memory knows into a conversation before the model sees it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	contextfold "contextfold.dev/go"
	contextfoldv1 "contextfold.dev/go/gen/contextfold/v1"
)

func main() {
	cf, err := contextfold.Dial(contextfold.Options{}) // CONTEXTFOLD_ADDRESS, else localhost:50051
	if err != nil {
		log.Fatal(err)
	}
	defer cf.Close()
	ctx := context.Background()

	_, err = cf.Memory.CreateStore(ctx, &contextfoldv1.CreateStoreRequest{Store: &contextfoldv1.Store{Name: "readme-prefs"}})
	var cfErr *contextfold.Error
	if err != nil && !(errors.As(err, &cfErr) && cfErr.Code == codes.AlreadyExists) {
		log.Fatal(err)
	}
	_, err = cf.Memory.AddMemories(ctx, &contextfoldv1.AddMemoriesRequest{
		Store: "readme-prefs",
		Memories: []*contextfoldv1.Memory{
			{Id: "ada-theme", Content: "Ada likes the Solarized Dark theme", UserId: "ada"},
			{Id: "ada-editor", Content: "Ada writes code in Helix", UserId: "ada"},
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	result, err := cf.Inject(ctx,
		[]contextfold.Message{contextfold.UserMessage("Which theme should I use in my editor?")},
		&contextfoldv1.InjectRequest{Memory: &contextfoldv1.MemoryOptions{
			Stores:     []string{"readme-prefs"},
			Scope:      &contextfoldv1.Scope{UserId: "ada"},
			MaxEntries: proto.Int32(1),
		}},
	)
	if err != nil {
		log.Fatal(err)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	out.SetIndent("", "  ")
	if err := out.Encode(contextfold.ForModel(result.Messages)); err != nil {
		log.Fatal(err)
	}
	var ids []string
	for _, entry := range result.Report.GetEntries() {
		ids = append(ids, entry.GetId())
	}
	fmt.Printf("injected %s for %q\n", strings.Join(ids, ", "), result.Report.GetQuery())
}
