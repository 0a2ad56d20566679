package ec2

import "github.com/eni-cni/eni-cni/ec2/pool"

// The store's ec2 data lives in package pool (no SDK there, so the CNI hot
// path can read it); these names let the warm code read naturally.
type (
	SourceState = pool.SourceState
	ENIState    = pool.ENIState
	Limits      = pool.Limits
	Tombstone   = pool.Tombstone
	Instance    = pool.Instance
	ENIInfo     = pool.ENIInfo
	WarmConfig  = pool.WarmConfig
)
