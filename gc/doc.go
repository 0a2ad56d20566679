// Package gc decides which IP allocations belong to pod sandboxes that no
// longer exist. It owns three things:
//
//   - a small CRI client (endpoint resolution as crictl does it, Version and
//     ListPodSandbox over a unix socket, every call bounded by a timeout);
//   - the planner, one pure function shared by the `eni-cni gc` subcommand
//     (liveness from the CRI listing) and the CNI GC verb (liveness from
//     cni.dev/valid-attachments);
//   - the text and JSON lines the subcommand prints about a plan.
//
// It never frees anything itself and does not import the store: the caller
// loads the allocations under the store lock, asks for a plan, and releases
// exactly the attachments in Plan.Free. The safety rules the planner enforces
// come from real outages (see docs/ARCHITECTURE.md, "GC safety"): a listing that
// failed must change nothing, an empty listing must not look like "no pods",
// and allocations younger than a grace period are never collected because
// containerd runs CNI ADD before the sandbox appears in ListPodSandbox.
package gc
