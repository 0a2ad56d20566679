package alloc

import "github.com/eni-cni/eni-cni/atomicfile"

// The tests are package alloc_test, so that they can use allocfake (which
// imports alloc), and import alloc with a dot to read as if inside it (the
// one use of a dot import Go's code review comments allow); these are the
// internals they check.
var (
	CopyAside   = copyAside
	LockHolders = lockHolders
	Migrations  = migrations
)

const MaxStateSize = maxStateSize

func (s *State) Validate() error { return s.validate() }

// SetCreateTemp makes the saves of d create their temporary file with
// create (a full disk, a read-only file system).
func (d *DiskStore) SetCreateTemp(create func(dir, pattern string) (atomicfile.File, error)) {
	d.save.CreateTemp = create
}
