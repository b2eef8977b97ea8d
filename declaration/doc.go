// Package declaration reads and writes declarations: one document that holds
// the whole desired state of one node (its mesh, its name, a revision number
// and the resources it should have), as people write it in YAML and as the
// wire carries it in JSON of the same shape.
//
// Parsing is strict. Unknown fields, values of the wrong type, relative or
// unclean paths, modes written as numbers, malformed digests, duplicate
// resources, YAML anchors, tags and multiple documents are all refused, and
// every refusal names the file, line and column of the offending node and
// the path of the field, so that a person can fix the file without guessing.
// A declaration is bounded (limits.go): its size, checked before anything
// reads it, its resources, and the length of every path, content and name,
// so that what parses fits in one message of the link and one record of the
// journal, and parsing takes memory in proportion to the input.
// A declaration that parses holds only specs the drivers can take as they
// are.
//
// This package does not apply anything, does not talk to the journal or the
// link, and does not decide what to do with a refused declaration: it only
// says what is wrong with one. Schema generates the JSON Schema checked in
// under schema/, for editors and for other producers of declarations.
package declaration
