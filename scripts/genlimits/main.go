// Command genlimits writes ec2/limits_table.go, eni-cni's built-in table
// of instance types' ENI and address limits, from the AWS VPC CNI's
// pkg/vpc/vpc_ip_resource_limit.go (aws/amazon-vpc-cni-k8s, Apache-2.0;
// its notice is kept in the output), so that a node of a known type needs
// no DescribeInstanceTypes: a thousand nodes launched together otherwise
// ask EC2 a thousand times, from the account's Describe bucket, for the
// same few answers. It reads the file's Go syntax, never runs it.
//
//	go run ./scripts/genlimits -src $VPC_CNI/pkg/vpc/vpc_ip_resource_limit.go -out ec2/limits_table.go
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
)

// limits is what eni-cni keeps of one type: the ENIs of the default card
// (warm attaches only there), the addresses per ENI (its primary one
// included) and, on types with several cards, each card's ENI limit.
type limits struct {
	name        string
	enis, ipv4  int
	defaultCard int
	cards       [][2]int // index, ENIs
}

func main() {
	src := flag.String("src", "", "the VPC CNI's pkg/vpc/vpc_ip_resource_limit.go")
	out := flag.String("out", "limits_table.go", "the file to write")
	rev := flag.String("rev", "", "the VPC CNI commit the file is from (written in the output)")
	flag.Parse()
	if *src == "" {
		log.Fatal("genlimits: -src is required (a checkout of github.com/aws/amazon-vpc-cni-k8s)")
	}
	types, err := read(*src)
	if err != nil {
		log.Fatalf("genlimits: %v", err)
	}
	code, err := render(types, *rev)
	if err != nil {
		log.Fatalf("genlimits: %v", err)
	}
	if err := os.WriteFile(*out, code, 0o644); err != nil {
		log.Fatalf("genlimits: %v", err)
	}
	fmt.Fprintf(os.Stderr, "genlimits: %d instance types, %d bytes of table\n", len(types), tableSize(types))
}

// read parses the instanceNetworkingLimits map literal of path.
func read(path string) ([]limits, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var lit *ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && vs.Names[0].Name == "instanceNetworkingLimits" && len(vs.Values) == 1 {
			lit, _ = vs.Values[0].(*ast.CompositeLit)
		}
		return lit == nil
	})
	if lit == nil {
		return nil, fmt.Errorf("%s: no instanceNetworkingLimits map", path)
	}
	var out []limits
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return nil, fmt.Errorf("%s: unexpected element %T", path, e)
		}
		l, err := entry(kv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		// As ec2.LimitsOf: a type no pod can use is left to EC2.
		if l.enis >= 1 && l.ipv4 >= 2 {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b limits) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// entry reads one "type": {ENILimit: …, IPv4Limit: …, NetworkCards: …}.
func entry(kv *ast.KeyValueExpr) (limits, error) {
	var l limits
	key, ok := kv.Key.(*ast.BasicLit)
	if !ok || key.Kind != token.STRING {
		return l, fmt.Errorf("unexpected key %T", kv.Key)
	}
	l.name, _ = strconv.Unquote(key.Value)
	if strings.ContainsAny(l.name, " \n") {
		return l, fmt.Errorf("instance type %q: a space or newline in its name", l.name)
	}
	body, ok := kv.Value.(*ast.CompositeLit)
	if !ok {
		return l, fmt.Errorf("%s: unexpected value %T", l.name, kv.Value)
	}
	fields, err := intFields(body)
	if err != nil {
		return l, fmt.Errorf("%s: %w", l.name, err)
	}
	l.enis, l.ipv4, l.defaultCard = fields["ENILimit"], fields["IPv4Limit"], fields["DefaultNetworkCardIndex"]
	for _, e := range body.Elts {
		kv := e.(*ast.KeyValueExpr)
		if id, _ := kv.Key.(*ast.Ident); id == nil || id.Name != "NetworkCards" {
			continue
		}
		cards, _ := kv.Value.(*ast.CompositeLit)
		if cards == nil {
			return l, fmt.Errorf("%s: NetworkCards is not a literal", l.name)
		}
		for _, c := range cards.Elts {
			cl, _ := c.(*ast.CompositeLit)
			if cl == nil {
				return l, fmt.Errorf("%s: a network card is not a literal", l.name)
			}
			cf, err := intFields(cl)
			if err != nil {
				return l, fmt.Errorf("%s: network card: %w", l.name, err)
			}
			l.cards = append(l.cards, [2]int{cf["NetworkCardIndex"], cf["MaximumNetworkInterfaces"]})
		}
	}
	// As ec2.LimitsOf: the default card's own limit, when it has one.
	for _, c := range l.cards {
		if c[0] == l.defaultCard && c[1] > 0 {
			l.enis = c[1]
		}
	}
	return l, nil
}

// intFields are the integer fields of a struct literal, by name.
func intFields(cl *ast.CompositeLit) (map[string]int, error) {
	m := map[string]int{}
	for _, e := range cl.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return nil, fmt.Errorf("unkeyed field")
		}
		id, _ := kv.Key.(*ast.Ident)
		v, _ := kv.Value.(*ast.BasicLit)
		if id == nil || v == nil || v.Kind != token.INT {
			continue
		}
		n, err := strconv.Atoi(v.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id.Name, err)
		}
		m[id.Name] = n
	}
	return m, nil
}

// line is one type in the table: "name enis ipv4[ card:enis,…]"; cards
// only for types with more than one.
func (l limits) line() string {
	s := fmt.Sprintf("%s %d %d", l.name, l.enis, l.ipv4)
	if len(l.cards) > 1 {
		parts := make([]string, len(l.cards))
		for i, c := range l.cards {
			parts[i] = fmt.Sprintf("%d:%d", c[0], c[1])
		}
		s += " " + strings.Join(parts, ",")
	}
	return s
}

func tableSize(types []limits) int {
	n := 0
	for _, l := range types {
		n += len(l.line()) + 1
	}
	return n
}

const notice = `// Code generated by scripts/genlimits; DO NOT EDIT.
//
// Generated from pkg/vpc/vpc_ip_resource_limit.go of the Amazon VPC CNI
// plugin for Kubernetes (https://github.com/aws/amazon-vpc-cni-k8s%s),
// whose notice follows:
//
// Copyright Amazon.com Inc. or its affiliates. All Rights Reserved.
//
// Licensed under the Apache License, Version 2.0 (the "License"). You may
// not use this file except in compliance with the License. A copy of the
// License is located at
//
//     http://aws.amazon.com/apache2.0/
//
// or in the "license" file accompanying this file. This file is distributed
// on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either
// express or implied. See the License for the specific language governing
// permissions and limitations under the License.

package ec2

// instanceTypeTable is the built-in table of instance types' limits
// (limits.go reads it): one type a line, "name ENIs IPv4-per-ENI", and for
// types with several network cards "card:ENIs,…". One string constant
// rather than a map: nothing to build at start-up, %d bytes in the binary.
const instanceTypeTable = ` + "`" + `
`

func render(types []limits, rev string) ([]byte, error) {
	at := ""
	if rev != "" {
		at = ", commit " + rev
	}
	var b strings.Builder
	fmt.Fprintf(&b, notice, at, tableSize(types))
	for _, l := range types {
		b.WriteString(l.line())
		b.WriteByte('\n')
	}
	b.WriteString("`\n")
	return format.Source([]byte(b.String()))
}
