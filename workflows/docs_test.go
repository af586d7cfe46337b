package workflows_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/workflows"
	"go.yaml.in/yaml/v3"
)

// A YAML block of the documentation says what it is after the language on its fence line, so that every example a
// reader copies is checked (GitHub shows only the first word):
//
//	```yaml workflow                              a whole workflow: parsed and validated
//	```yaml workflow-part examples/flash-sale.yaml a part of one: its top-level keys replace that workflow's, and
//	                                              the whole is validated (names it uses must exist there)
//	```yaml worker                                a worker configuration: decoded and compiled
//	```yaml other                                 not IRS's (a CI step): left alone
//
// A YAML block without one of these fails the test, so a new example cannot escape it.
const (
	markWorkflow = "workflow"
	markPart     = "workflow-part"
	markWorker   = "worker"
	markOther    = "other"
)

// docBlock is one fenced YAML block of a Markdown file.
type docBlock struct {
	file string
	line int    // the line of its first content line
	info string // the fence line's words after "yaml"
	text string
}

// TestDocumentedYAML validates every YAML block of README.md and docs/*.md as what its fence line says it is.
func TestDocumentedYAML(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	var blocks []docBlock
	for _, f := range files {
		bs, err := yamlBlocks(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	checked := 0
	for _, b := range blocks {
		name := fmt.Sprintf("%s:%d", filepath.Base(b.file), b.line)
		t.Run(name, func(t *testing.T) {
			words := strings.Fields(b.info)
			if len(words) == 0 {
				t.Fatalf("%s:%d: a yaml block must say what it is: ```yaml workflow | workflow-part FILE | worker | other", b.file, b.line-1)
			}
			var err error
			switch words[0] {
			case markWorkflow:
				err = checkWorkflow([]byte(b.text), b)
			case markPart:
				if len(words) != 2 {
					t.Fatalf("%s:%d: ```yaml workflow-part needs the workflow it is part of (a path from the repository's root)", b.file, b.line-1)
				}
				err = checkPart(b, filepath.Join("..", words[1]))
			case markWorker:
				err = checkWorker(b)
			case markOther:
				return
			default:
				t.Fatalf("%s:%d: unknown yaml block kind %q (want workflow, workflow-part FILE, worker or other)", b.file, b.line-1, words[0])
			}
			if err != nil {
				t.Errorf("%s:%d (%s): %v", b.file, b.line, words[0], err)
			}
			checked++
		})
	}
	if checked < 10 {
		t.Errorf("checked %d documented YAML blocks, want at least 10 (README.md and docs/ hold more)", checked)
	}
}

// yamlBlocks returns the fenced ```yaml blocks of a Markdown file.
func yamlBlocks(path string) ([]docBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []docBlock
	var cur *docBlock
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```yaml"):
			cur = &docBlock{file: path, line: n + 1, info: strings.TrimPrefix(trimmed, "```yaml")}
			text.Reset()
		case cur != nil && strings.HasPrefix(trimmed, "```"):
			cur.text = text.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			text.WriteString(line + "\n")
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a yaml block that never ends", path, cur.line-1)
	}
	return out, sc.Err()
}

func checkWorkflow(data []byte, b docBlock) error {
	doc, err := workflows.Parse(data, b.file)
	if err != nil {
		return err
	}
	return workflows.Validate(doc, compileWorker)
}

// checkPart puts the block's top-level keys in place of the base workflow's and validates the whole. The block
// comes last in the merged document, so that a problem in it can be told by its line.
func checkPart(b docBlock, base string) error {
	baseText, err := os.ReadFile(base)
	if err != nil {
		return err
	}
	var part yaml.Node
	if err := yaml.Unmarshal([]byte(b.text), &part); err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	if part.Kind != yaml.DocumentNode || len(part.Content) != 1 || part.Content[0].Kind != yaml.MappingNode {
		return errors.New("a workflow part must be a mapping of a workflow's top-level keys")
	}
	replaced := map[string]bool{}
	for i := 0; i < len(part.Content[0].Content); i += 2 {
		replaced[part.Content[0].Content[i].Value] = true
	}
	kept, err := withoutKeys(string(baseText), replaced)
	if err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	merged := kept + b.text
	keptLines := strings.Count(kept, "\n")
	err = checkWorkflow([]byte(merged), b)
	var invalid *workflows.InvalidError
	if !errors.As(err, &invalid) {
		return err
	}
	// Lines of the block are told as lines of the Markdown file; the base's as its own.
	var out []string
	for _, fe := range invalid.Errors {
		where := fmt.Sprintf("%s (the rest of the workflow):%d", base, fe.Line)
		if fe.Line > keptLines {
			where = fmt.Sprintf("%s:%d", b.file, b.line+fe.Line-keptLines-1)
		}
		out = append(out, fmt.Sprintf("%s: %s: %v", where, fe.Path, fe.Err))
	}
	return errors.New(strings.Join(out, "\n"))
}

// withoutKeys is a YAML document's text without the top-level keys named (each key with the lines under it).
func withoutKeys(text string, keys map[string]bool) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(text), &root); err != nil {
		return "", err
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return "", errors.New("not a mapping")
	}
	lines := strings.SplitAfter(text, "\n")
	drop := make([]bool, len(lines)+1)
	m := root.Content[0].Content
	for i := 0; i < len(m); i += 2 {
		if !keys[m[i].Value] {
			continue
		}
		end := len(lines) // up to the next top-level key, or the end
		if i+2 < len(m) {
			end = m[i+2].Line - 1
		}
		for l := m[i].Line; l <= end; l++ {
			drop[l] = true
		}
	}
	var b strings.Builder
	for i, l := range lines {
		if !drop[i+1] {
			b.WriteString(l)
		}
	}
	s := b.String()
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s, nil
}

func checkWorker(b docBlock) error {
	var c irsv1.WorkerConfig
	if err := yamlpb.Unmarshal([]byte(b.text), &c); err != nil {
		return err
	}
	_, err := worker.Compile(&c)
	return err
}
