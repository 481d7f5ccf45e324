package contextfold

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	contextfoldv1 "contextfold.dev/go/gen/contextfold/v1"
)

// Message is one turn of a conversation in the Bedrock Converse shape, as agents hold it and
// as encoding/json reads it: {"role": "user", "content": [{"text": "…"}]}.
type Message struct {
	// Role is "user" or "assistant".
	Role string `json:"role"`
	// Content is the turn's blocks, in order.
	Content []Block `json:"content"`
}

// Block is one content block in Converse JSON: {"text": "…"}, {"toolUse": {…}},
// {"toolResult": {…}}, {"injected": {…}} (what contextfold folded in), or any other kind,
// which travels as its JSON and comes back as it was.
type Block map[string]interface{}

// Text is a text block.
func Text(text string) Block { return Block{"text": text} }

// UserMessage is a user turn holding one text block.
func UserMessage(text string) Message { return Message{Role: "user", Content: []Block{Text(text)}} }

// InjectResult is the folded conversation and the report of what was injected, or why not.
type InjectResult struct {
	// Messages is the conversation with the injected blocks ({"injected": {"source", "text",
	// "entryIds", "sources"}}) in place. Keep them in the agent's history, so later calls do
	// not inject the same entries again; show the model ForModel(Messages).
	Messages []Message
	// Report says what was injected from each source, or why not.
	Report *contextfoldv1.InjectionReport
	// Response is the service's answer as sent.
	Response *contextfoldv1.InjectResponse
}

// Inject folds memory and provider context into messages. settings carries the trigger, memory,
// providers and format settings as the protos define them (InjectRequest; its Messages field is
// set from messages); nil injects with the service's defaults. The call's deadline is ctx's,
// else the client's timeout. Injection fails open on the service's side: a source that breaks
// leaves the messages as they were and says why in the report.
func (c *Client) Inject(ctx context.Context, messages []Message, settings *contextfoldv1.InjectRequest) (*InjectResult, error) {
	request := &contextfoldv1.InjectRequest{}
	if settings != nil {
		request = proto.Clone(settings).(*contextfoldv1.InjectRequest)
	}
	converted, err := ToProto(messages)
	if err != nil {
		return nil, err
	}
	request.Messages = converted
	response, err := c.Injection.Inject(ctx, request)
	if err != nil {
		return nil, err
	}
	folded, err := FromProto(response.GetMessages())
	if err != nil {
		return nil, err
	}
	return &InjectResult{Messages: folded, Report: response.GetReport(), Response: response}, nil
}

// ForModel is messages as the model should see them: each injected block becomes the text
// block it stands for (its text begins with the blank line that separates it from the user's
// words). The agent keeps the injected blocks themselves in its history.
func ForModel(messages []Message) []Message {
	shown := make([]Message, len(messages))
	for i, message := range messages {
		content := make([]Block, len(message.Content))
		for j, block := range message.Content {
			content[j] = block
			if injected, ok := block["injected"].(map[string]interface{}); ok {
				content[j] = Block{"text": injected["text"]}
			}
		}
		shown[i] = Message{Role: message.Role, Content: content}
	}
	return shown
}

var roles = map[string]contextfoldv1.Role{"user": contextfoldv1.Role_ROLE_USER, "assistant": contextfoldv1.Role_ROLE_ASSISTANT}

// ToProto converts messages for a request. Text, toolUse, toolResult and injected blocks get
// their typed form; any other block travels as its JSON text.
func ToProto(messages []Message) ([]*contextfoldv1.Message, error) {
	converted := make([]*contextfoldv1.Message, len(messages))
	for i, message := range messages {
		role, ok := roles[message.Role]
		if !ok {
			return nil, fmt.Errorf("contextfold: messages[%d].role: %q is not \"user\" or \"assistant\"", i, message.Role)
		}
		content := make([]*contextfoldv1.ContentBlock, len(message.Content))
		for j, block := range message.Content {
			var err error
			if content[j], err = blockToProto(block); err != nil {
				return nil, fmt.Errorf("contextfold: messages[%d].content[%d]: %w", i, j, err)
			}
		}
		converted[i] = &contextfoldv1.Message{Role: role, Content: content}
	}
	return converted, nil
}

func blockToProto(block Block) (*contextfoldv1.ContentBlock, error) {
	if len(block) == 1 {
		if text, ok := block["text"].(string); ok {
			return &contextfoldv1.ContentBlock{Block: &contextfoldv1.ContentBlock_Text{Text: text}}, nil
		}
		if injected, ok := injectedBlock(block["injected"]); ok {
			return &contextfoldv1.ContentBlock{Block: &contextfoldv1.ContentBlock_Injected{Injected: injected}}, nil
		}
		if use, ok := toolUse(block["toolUse"]); ok {
			return &contextfoldv1.ContentBlock{Block: &contextfoldv1.ContentBlock_ToolUse{ToolUse: use}}, nil
		}
		if result, ok := toolResult(block["toolResult"]); ok {
			return &contextfoldv1.ContentBlock{Block: &contextfoldv1.ContentBlock_ToolResult{ToolResult: result}}, nil
		}
	}
	raw, err := json.Marshal(block)
	if err != nil {
		return nil, err
	}
	return &contextfoldv1.ContentBlock{Block: &contextfoldv1.ContentBlock_RawJson{RawJson: string(raw)}}, nil
}

// fields is value as a JSON object holding no keys but the named ones, or false.
func fields(value interface{}, keys ...string) (map[string]interface{}, bool) {
	object, ok := value.(map[string]interface{})
	if !ok {
		return nil, false
	}
	allowed := map[string]bool{}
	for _, key := range keys {
		allowed[key] = true
	}
	for key := range object {
		if !allowed[key] {
			return nil, false
		}
	}
	return object, true
}

func injectedBlock(value interface{}) (*contextfoldv1.InjectedBlock, bool) {
	object, ok := fields(value, "source", "text", "entryIds", "sources")
	if !ok {
		return nil, false
	}
	source, sourceOK := object["source"].(string)
	text, textOK := object["text"].(string)
	entryIDs, idsOK := stringList(object["entryIds"])
	sources, sourcesOK := stringList(object["sources"])
	if !sourceOK || !textOK || !idsOK || !sourcesOK {
		return nil, false
	}
	return &contextfoldv1.InjectedBlock{Source: source, Text: text, EntryIds: entryIDs, Sources: sources}, true
}

// stringList is a JSON array of strings (absent: none), or false.
func stringList(value interface{}) ([]string, bool) {
	switch items := value.(type) {
	case nil:
		return nil, true
	case []string:
		return items, true
	case []interface{}:
		texts := make([]string, len(items))
		for i, item := range items {
			text, ok := item.(string)
			if !ok {
				return nil, false
			}
			texts[i] = text
		}
		return texts, true
	}
	return nil, false
}

func toolUse(value interface{}) (*contextfoldv1.ToolUseBlock, bool) {
	object, ok := fields(value, "toolUseId", "name", "input")
	id, idOK := object["toolUseId"].(string)
	name, nameOK := object["name"].(string)
	_, hasInput := object["input"]
	input, err := json.Marshal(object["input"])
	if !ok || !idOK || !nameOK || !hasInput || err != nil {
		return nil, false
	}
	return &contextfoldv1.ToolUseBlock{ToolUseId: id, Name: name, InputJson: string(input)}, true
}

func toolResult(value interface{}) (*contextfoldv1.ToolResultBlock, bool) {
	object, ok := fields(value, "toolUseId", "status", "content")
	id, idOK := object["toolUseId"].(string)
	_, hasContent := object["content"]
	content, err := json.Marshal(object["content"])
	if !ok || !idOK || !hasContent || err != nil {
		return nil, false
	}
	status := ""
	if given, present := object["status"]; present {
		// The proto's empty status means "not said": an empty one given stays as its JSON.
		if status, ok = given.(string); !ok || status == "" {
			return nil, false
		}
	}
	return &contextfoldv1.ToolResultBlock{ToolUseId: id, Status: status, ContentJson: string(content)}, true
}

// FromProto converts a response's messages back to the Converse shape.
func FromProto(messages []*contextfoldv1.Message) ([]Message, error) {
	converted := make([]Message, len(messages))
	for i, message := range messages {
		role := "user"
		if message.GetRole() == contextfoldv1.Role_ROLE_ASSISTANT {
			role = "assistant"
		}
		content := make([]Block, len(message.GetContent()))
		for j, block := range message.GetContent() {
			var err error
			if content[j], err = blockFromProto(block); err != nil {
				return nil, fmt.Errorf("contextfold: messages[%d].content[%d]: %w", i, j, err)
			}
		}
		converted[i] = Message{Role: role, Content: content}
	}
	return converted, nil
}

func blockFromProto(block *contextfoldv1.ContentBlock) (Block, error) {
	switch kind := block.GetBlock().(type) {
	case *contextfoldv1.ContentBlock_Text:
		return Text(kind.Text), nil
	case *contextfoldv1.ContentBlock_Injected:
		injected := map[string]interface{}{
			"source": kind.Injected.GetSource(), "text": kind.Injected.GetText(), "entryIds": orEmpty(kind.Injected.GetEntryIds()),
		}
		if sources := kind.Injected.GetSources(); len(sources) > 0 {
			injected["sources"] = sources
		}
		return Block{"injected": injected}, nil
	case *contextfoldv1.ContentBlock_ToolUse:
		input, err := loads(kind.ToolUse.GetInputJson())
		if err != nil {
			return nil, err
		}
		return Block{"toolUse": map[string]interface{}{"toolUseId": kind.ToolUse.GetToolUseId(), "name": kind.ToolUse.GetName(), "input": input}}, nil
	case *contextfoldv1.ContentBlock_ToolResult:
		content, err := loads(kind.ToolResult.GetContentJson())
		if err != nil {
			return nil, err
		}
		result := map[string]interface{}{"toolUseId": kind.ToolResult.GetToolUseId(), "content": content}
		if status := kind.ToolResult.GetStatus(); status != "" {
			result["status"] = status
		}
		return Block{"toolResult": result}, nil
	case *contextfoldv1.ContentBlock_RawJson:
		value, err := loads(kind.RawJson)
		if err != nil {
			return nil, err
		}
		object, ok := value.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("raw_json is not a JSON object")
		}
		return Block(object), nil
	}
	// Image, document and reasoning blocks come back typed only when they were sent typed,
	// which this client never does: it sends them as their JSON.
	return nil, fmt.Errorf("a %T block, which this client does not send", block.GetBlock())
}

func orEmpty(items []string) []string {
	if items == nil {
		return []string{}
	}
	return items
}

// loads reads JSON text, numbers kept exactly as written (json.Number).
func loads(text string) (interface{}, error) {
	decoder := json.NewDecoder(bytes.NewReader([]byte(text)))
	decoder.UseNumber()
	var value interface{}
	if err := decoder.Decode(&value); err != nil {
		return nil, err
	}
	return value, nil
}
