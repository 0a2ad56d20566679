//go:build !lean

package ec2

import (
	"testing"

	"github.com/eni-cni/eni-cni/netconf"
)

// IMDS is read with IMDSv2 only unless the configuration opts into the
// IMDSv1 fallback.
func TestIMDSv1FallbackIsOptIn(t *testing.T) {
	for conf, want := range map[string]bool{
		`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni"}`:                        false,
		`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","imdsV1Fallback":false}`: false,
		`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","imdsV1Fallback":true}`:  true,
	} {
		cfg, err := netconf.Parse([]byte(conf))
		if err != nil {
			t.Fatalf("%s: %v", conf, err)
		}
		if cfg.IMDSv1Fallback != want || (len(MetadataOptions(cfg)) > 0) != want {
			t.Errorf("%s: IMDSv1Fallback %t with %d options, want %t", conf, cfg.IMDSv1Fallback, len(MetadataOptions(cfg)), want)
		}
	}
}
