package gc

import (
	"slices"
	"testing"
)

func TestValidAttachmentsFromConfig(t *testing.T) {
	a := ValidAttachment{ContainerID: "a", IfName: "eth0"}
	b := ValidAttachment{ContainerID: "b", IfName: "net1"}
	tests := []struct {
		name    string
		conf    string
		want    []ValidAttachment
		wantErr bool
	}{
		{"valid-attachments", `{"cniVersion":"1.1.0","name":"pods","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"},{"containerID":"b","ifname":"net1"}]}`, []ValidAttachment{a, b}, false},
		{"fallback to attachments", `{"name":"pods","cni.dev/attachments":[{"containerID":"a","ifname":"eth0"}]}`, []ValidAttachment{a}, false},
		{"valid-attachments wins", `{"cni.dev/attachments":[{"containerID":"b","ifname":"net1"}],"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`, []ValidAttachment{a}, false},
		{"null means none", `{"cni.dev/valid-attachments":null}`, nil, false},
		{"absent means none", `{"name":"pods"}`, nil, false},
		{"empty list", `{"cni.dev/valid-attachments":[]}`, []ValidAttachment{}, false},
		{"bad entry", `{"cni.dev/valid-attachments":[{"containerID":1}]}`, nil, true},
		{"not json", `{`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ValidAttachmentsFromConfig([]byte(tc.conf))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
