package contextfold

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// KeyProblem says what is wrong with key as an API key ("" when nothing is): a header carries
// printable ASCII only, and a key copied from a page's placeholder (cfk_…) is not a key.
func KeyProblem(key string) string {
	if strings.TrimSpace(key) == "" {
		return "is empty"
	}
	if at := strings.IndexRune(key, '\u2026'); at >= 0 {
		return fmt.Sprintf("holds '…' (U+2026) at position %d: it is a page's placeholder (cfk_…), not a key;"+
			" create one with `contextfold keys create`", utf8.RuneCountInString(key[:at]))
	}
	if strings.Contains(key, "...") || (strings.HasPrefix(key, "<") && strings.HasSuffix(key, ">")) || strings.HasPrefix(key, "$") {
		return "looks like a placeholder, not a key; create one with `contextfold keys create`"
	}
	position := 0
	for _, char := range key {
		if char < 0x21 || char > 0x7e {
			return fmt.Sprintf("holds U+%04X at position %d, which a header cannot carry (a key is printable ASCII, no spaces)", char, position)
		}
		position++
	}
	return ""
}

// checkedKey is nil when key can be sent, else an error naming source and what is wrong.
func checkedKey(key, source string) error {
	if problem := KeyProblem(key); problem != "" {
		return fmt.Errorf("contextfold: the API key from %s %s", source, problem)
	}
	return nil
}
