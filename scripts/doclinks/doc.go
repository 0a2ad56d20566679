// Package doclinks holds a test, not code: every relative link in the
// project's markdown (README.md, SECURITY.md, docs/, scripts/) must reach a
// file that exists and, when it names a section, a heading of that file.
// The README is a front door whose links are the way into docs/, so a file
// moved or a heading renamed must fail a test rather than strand a reader.
package doclinks
