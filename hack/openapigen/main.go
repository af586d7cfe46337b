// Command openapigen writes the OpenAPI document of the worker's REST control API. It reads a buf image (the
// protobuf descriptors with their comments) on stdin and writes JSON on stdout:
//
//	buf build -o - | go run ./hack/openapigen > worker/control/rest/openapi.json
//
// `make proto` runs it; CI checks that the committed document is what it generates.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/irs-sim/irs/internal/protoschema"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	files, err := protoschema.ReadImage(in)
	if err != nil {
		return err
	}
	msg := func(name string) protoreflect.MessageDescriptor {
		d, err := files.FindDescriptorByName(protoreflect.FullName("irs.v1." + name))
		if err != nil {
			panic(fmt.Sprintf("irs.v1.%s: %v", name, err))
		}
		return d.(protoreflect.MessageDescriptor)
	}
	b := protoschema.NewBuilder("#/components/schemas/")
	ref := func(name string) protoschema.Schema { return b.Message(msg(name)) }
	doc := document(ref)
	b.Definitions["Error"] = protoschema.Schema{
		"type": "object", "required": []string{"error"},
		"properties": protoschema.Schema{
			"error": protoschema.Schema{"type": "string"},
			"violations": protoschema.Schema{"type": "array", "items": protoschema.Schema{
				"type": "object",
				"properties": protoschema.Schema{
					"field":       protoschema.Schema{"type": "string", "description": "Path of the field, e.g. calls[0].timeout"},
					"description": protoschema.Schema{"type": "string"},
					"line":        protoschema.Schema{"type": "integer", "description": "Position in the request body"},
					"column":      protoschema.Schema{"type": "integer"},
				},
			}},
		},
	}
	doc["components"].(map[string]any)["schemas"] = b.Definitions
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

type schema = protoschema.Schema

func jsonBody(s schema) schema {
	return schema{"content": schema{"application/json": schema{"schema": s}}}
}

func document(ref func(string) schema) map[string]any {
	errorSchema := schema{"$ref": "#/components/schemas/Error"}
	ok := func(desc string, s schema) schema {
		return schema{"description": desc, "content": jsonBody(s)["content"]}
	}
	errors := schema{
		"400": schema{"description": "Invalid request: every offending field is listed; nothing changed.", "content": jsonBody(errorSchema)["content"]},
		"401": schema{"description": "Missing or wrong bearer token.", "content": jsonBody(errorSchema)["content"]},
		"413": schema{"description": "Body larger than 1 MiB.", "content": jsonBody(errorSchema)["content"]},
	}
	with := func(extra schema, codes ...string) schema {
		for _, c := range codes {
			extra[c] = errors[c]
		}
		return extra
	}
	state := ref("ConfigState")
	text := schema{"content": schema{"text/plain": schema{"schema": schema{"type": "string"}}}}
	return map[string]any{
		"openapi": "3.1.0",
		"info": schema{
			"title":       "IRS worker control API",
			"version":     "v1",
			"description": "Live control of an IRS worker. The same operations are served over gRPC (irs.v1.WorkerControlService) on the same port. Bodies are the protojson form of the irs.v1 messages with proto field names, the same documents as YAML configuration files. Every change is validated whole and applied atomically with a new version; an invalid one changes nothing.",
		},
		"security": []any{schema{"bearer": []any{}}},
		"paths": schema{
			"/healthz": schema{"get": schema{"summary": "Liveness (no token needed)", "security": []any{},
				"responses": schema{"200": schema{"description": "Alive", "content": text["content"]}}}},
			"/readyz": schema{"get": schema{"summary": "Readiness (no token needed)", "security": []any{},
				"responses": schema{"200": schema{"description": "Serving", "content": text["content"]},
					"503": schema{"description": "Not serving yet", "content": text["content"]}}}},
			"/v1/info": schema{"get": schema{"summary": "Describe the worker",
				"responses": with(schema{"200": ok("The worker", ref("WorkerInfo"))}, "401")}},
			"/v1/config": schema{
				"get": schema{"summary": "The configuration in effect and its version",
					"responses": with(schema{"200": ok("The configuration", state)}, "401")},
				"put": schema{"summary": "Replace the configuration",
					"requestBody": schema{"required": true, "content": schema{
						"application/json": schema{"schema": ref("WorkerConfig")},
						"application/yaml": schema{"schema": ref("WorkerConfig")}}},
					"responses": with(schema{"200": ok("The configuration now in effect", state)}, "400", "401", "413")},
				"patch": schema{"summary": "Change part of the configuration with a JSON merge patch (RFC 7386)",
					"description": "null removes a field; lists are replaced whole. Example: {\"serve\": {\"delay\": \"200ms\"}}",
					"requestBody": schema{"required": true, "content": schema{
						"application/merge-patch+json": schema{"schema": schema{"type": "object"}},
						"application/json":             schema{"schema": schema{"type": "object"}}}},
					"responses": with(schema{"200": ok("The configuration now in effect", state)}, "400", "401", "413")},
			},
			"/v1/stats": schema{"get": schema{"summary": "What was measured since the last reset (or the start)",
				"parameters": []any{schema{"name": "reset", "in": "query", "schema": schema{"type": "boolean"},
					"description": "Start a new window after this read."}},
				"responses": with(schema{"200": ok("A stats snapshot", ref("StatsSnapshot"))}, "400", "401")}},
			"/v1/load": schema{
				"post": schema{"summary": "Set the load and (re)start it",
					"requestBody": schema{"required": true, "content": schema{
						"application/json": schema{"schema": ref("Load")}, "application/yaml": schema{"schema": ref("Load")}}},
					"responses": with(schema{"200": ok("The configuration now in effect", state)}, "400", "401", "413")},
				"delete": schema{"summary": "Stop the load (requests in flight finish)",
					"responses": with(schema{"200": ok("The configuration now in effect", state)}, "401")},
			},
			"/v1/openapi.json": schema{"get": schema{"summary": "This document",
				"responses": with(schema{"200": schema{"description": "OpenAPI 3.1", "content": jsonBody(schema{"type": "object"})["content"]}}, "401")}},
			"/metrics": schema{"get": schema{"summary": "Metrics in the Prometheus text format",
				"responses": with(schema{"200": schema{"description": "Metrics", "content": text["content"]}}, "401")}},
		},
		"components": map[string]any{
			"securitySchemes": schema{"bearer": schema{"type": "http", "scheme": "bearer",
				"description": "Required on every call except /healthz and /readyz when the worker has a control token."}},
			"schemas": nil,
		},
	}
}
