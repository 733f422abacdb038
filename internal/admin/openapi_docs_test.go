package admin_test

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sproutmq/sprout/internal/docgen"
)

var update = flag.Bool("update", false, "rewrite the generated documentation (make docs)")

// adminGuide is the admin API guide, whose reference is rendered from
// openapi.json.
const adminGuide = "../../docs/admin-api.md"

// TestOpenAPIDocs: the reference in docs/admin-api.md is openapi.json
// rendered (go test -run TestOpenAPIDocs -args -update rewrites it).
func TestOpenAPIDocs(t *testing.T) {
	doc, _ := loadSpec(t)
	docgen.CheckBlock(t, adminGuide, "reference", "TestOpenAPIDocs in internal/admin", renderReference(doc), *update)
}

// methodOrder is the order of an endpoint's methods in the reference.
var methodOrder = []string{"GET", "POST", "DELETE"}

// renderReference writes the endpoints, grouped by tag in the document's
// order, then the schemas, in Markdown.
func renderReference(doc *openapi3.T) string {
	var b strings.Builder
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, tag := range doc.Tags {
		heading := false
		for _, path := range paths {
			item := doc.Paths.Value(path)
			for _, method := range methodOrder {
				op := item.GetOperation(method)
				if op == nil || !slices.Contains(op.Tags, tag.Name) {
					continue
				}
				if !heading {
					heading = true
					fmt.Fprintf(&b, "### %s\n\n", strings.ToUpper(tag.Name[:1])+tag.Name[1:])
					if tag.Description != "" {
						fmt.Fprintf(&b, "%s\n\n", tag.Description)
					}
				}
				renderOperation(&b, method, path, item, op)
			}
		}
	}
	b.WriteString("### Errors\n\nEvery error is an [Error](#error), `{\"error\": \"...\"}`, with its status:\n\n" +
		"| error | status | meaning |\n| --- | --- | --- |\n")
	errs := make([]string, 0, len(doc.Components.Responses))
	for name := range doc.Components.Responses {
		errs = append(errs, name)
	}
	status := func(name string) string {
		for _, path := range paths {
			for _, op := range doc.Paths.Value(path).Operations() {
				for code, r := range op.Responses.Map() {
					if strings.HasSuffix(r.Ref, "/"+name) {
						return code
					}
				}
			}
		}
		return ""
	}
	sort.Slice(errs, func(i, j int) bool { // by status, then name: two may share one
		if si, sj := status(errs[i]), status(errs[j]); si != sj {
			return si < sj
		}
		return errs[i] < errs[j]
	})
	for _, name := range errs {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, status(name), cell(*doc.Components.Responses[name].Value.Description))
	}
	b.WriteString("\n### Schemas\n\n")
	names := make([]string, 0, len(doc.Components.Schemas))
	for name := range doc.Components.Schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := doc.Components.Schemas[name].Value
		fmt.Fprintf(&b, "#### %s\n\n", name)
		if s.Description != "" {
			fmt.Fprintf(&b, "%s\n\n", cell(s.Description))
		}
		props := make([]string, 0, len(s.Properties))
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		b.WriteString("| field | type | required | meaning |\n| --- | --- | --- | --- |\n")
		for _, p := range props {
			ref := s.Properties[p]
			req := ""
			if slices.Contains(s.Required, p) {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p, typeOf(ref), req, cell(ref.Value.Description))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func renderOperation(b *strings.Builder, method, path string, item *openapi3.PathItem, op *openapi3.Operation) {
	fmt.Fprintf(b, "#### `%s %s`\n\n**%s.** %s", method, path, op.Summary, cell(op.Description))
	if op.Security != nil && len(*op.Security) == 0 {
		b.WriteString(" Needs no credentials.")
	}
	b.WriteString("\n\n")
	params := append(slices.Clone(item.Parameters), op.Parameters...)
	if len(params) > 0 {
		b.WriteString("| parameter | in | type | meaning |\n| --- | --- | --- | --- |\n")
		for _, p := range params {
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", p.Value.Name, p.Value.In, typeOf(p.Value.Schema), cell(p.Value.Description))
		}
		b.WriteString("\n")
	}
	if body := op.RequestBody; body != nil {
		var kinds []string
		for _, ct := range []string{"application/json", "application/x-www-form-urlencoded"} {
			if mt := body.Value.Content.Get(ct); mt != nil {
				kinds = append(kinds, fmt.Sprintf("%s (`%s`)", typeOf(mt.Schema), ct))
			}
		}
		fmt.Fprintf(b, "Body: %s.\n\n", strings.Join(kinds, " or "))
	}
	b.WriteString("| status | answer |\n| --- | --- |\n")
	codes := make([]string, 0, op.Responses.Len())
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		ref := op.Responses.Value(code)
		r := ref.Value
		what := cell(*r.Description)
		switch mt := r.Content.Get("application/json"); {
		case ref.Ref != "":
			// An error: its meaning is in the table of errors.
			name := ref.Ref[strings.LastIndexByte(ref.Ref, '/')+1:]
			what = fmt.Sprintf("[%s](#errors)", name)
		case mt != nil:
			what = typeOf(mt.Schema) + ": " + what
		}
		fmt.Fprintf(b, "| %s | %s |\n", code, what)
	}
	b.WriteString("\n")
}

// typeOf describes a schema in a few words: a link to a component, the
// JSON types, the items of an array, enums, bounds and the default.
func typeOf(ref *openapi3.SchemaRef) string {
	if ref == nil {
		return ""
	}
	if ref.Ref != "" {
		name := ref.Ref[strings.LastIndexByte(ref.Ref, '/')+1:]
		return fmt.Sprintf("[%s](#%s)", name, strings.ToLower(name))
	}
	s := ref.Value
	var words []string
	types := s.Type.Slice()
	if slices.Contains(types, "array") && s.Items != nil {
		words = append(words, "array of "+typeOf(s.Items))
	} else if len(types) > 0 {
		words = append(words, strings.Join(types, " or "))
	}
	if len(s.Enum) > 0 {
		var vals []string
		for _, v := range s.Enum {
			vals = append(vals, fmt.Sprintf("`%v`", v))
		}
		words = append(words, "one of "+strings.Join(vals, ", "))
	}
	switch {
	case s.Min != nil && s.Max != nil:
		words = append(words, fmt.Sprintf("%g to %g", *s.Min, *s.Max))
	case s.Min != nil && *s.Min != 0:
		words = append(words, fmt.Sprintf("from %g", *s.Min))
	}
	if s.MaxLength != nil {
		words = append(words, fmt.Sprintf("%d to %d characters", s.MinLength, *s.MaxLength))
	}
	if s.Default != nil {
		words = append(words, fmt.Sprintf("default `%v`", s.Default))
	}
	return strings.Join(words, ", ")
}

// cell makes text fit a Markdown table cell, and shows <other> as text.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
