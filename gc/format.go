package gc

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// shortID is the 12-character form people know from crictl and docker.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func verb(dryRun bool) string {
	if dryRun {
		return "would free"
	}
	return "freed"
}

// FreeLine is the line printed for one freed attachment, e.g.
//
//	gc: freed 10.99.0.5 sandbox 3f2a1b2c3d4e/eth0 pod default/web-0 network pods age 2h0m5s: sandbox not listed by runtime
//
// Callers that free one by one and may fail midway print it per success.
func FreeLine(d Dead, dryRun bool) string {
	return fmt.Sprintf("gc: %s %s sandbox %s/%s pod %s/%s network %s age %s: %s",
		verb(dryRun), d.IP, shortID(d.ContainerID), d.IfName,
		orDash(d.PodNamespace), orDash(d.PodName), d.Network, d.Age.Round(time.Second), d.Reason)
}

// Summary is the last line, e.g. "gc: freed 3, kept 2 young, 10 alive".
// A refused plan reads "gc: refused, freed 0, ...".
func Summary(p Plan, dryRun bool) string {
	prefix := "gc: "
	if p.Refused != nil {
		prefix = "gc: refused, "
	}
	s := fmt.Sprintf("%s%s %d, kept %d young, %d alive", prefix, verb(dryRun), len(p.Free), len(p.Young), len(p.Alive))
	if p.Other > 0 {
		s += fmt.Sprintf(", %d of other networks", p.Other)
	}
	return s
}

// WriteText prints one line per attachment in p.Free, one per warning, then
// the summary. It assumes every attachment of p.Free was freed (or, with
// dryRun, would be). The refusal itself is the caller's error to report.
func WriteText(w io.Writer, p Plan, dryRun bool) error {
	for _, d := range p.Free {
		if _, err := fmt.Fprintln(w, FreeLine(d, dryRun)); err != nil {
			return err
		}
	}
	for _, warn := range p.Warnings {
		if _, err := fmt.Fprintln(w, "gc: warning: "+warn); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, Summary(p, dryRun))
	return err
}

type jsonDead struct {
	Attachment
	Reason     string `json:"reason"`
	AgeSeconds int64  `json:"ageSeconds"`
}

type jsonYoung struct {
	Attachment
	AgeSeconds  int64 `json:"ageSeconds"`
	LeftSeconds int64 `json:"leftSeconds"`
}

type jsonPlan struct {
	DryRun   bool        `json:"dryRun"`
	Free     []jsonDead  `json:"free"`
	Young    []jsonYoung `json:"young"`
	Alive    int         `json:"alive"`
	Other    int         `json:"otherNetworks"`
	Warnings []string    `json:"warnings"`
	Refused  string      `json:"refused,omitempty"`
}

// WriteJSON prints the plan as one JSON object with full container IDs, for
// --json. Lists are never null, so consumers can iterate without checks.
func WriteJSON(w io.Writer, p Plan, dryRun bool) error {
	out := jsonPlan{DryRun: dryRun, Free: []jsonDead{}, Young: []jsonYoung{}, Alive: len(p.Alive), Other: p.Other, Warnings: []string{}}
	for _, d := range p.Free {
		out.Free = append(out.Free, jsonDead{Attachment: d.Attachment, Reason: d.Reason, AgeSeconds: seconds(d.Age)})
	}
	for _, y := range p.Young {
		out.Young = append(out.Young, jsonYoung{Attachment: y.Attachment, AgeSeconds: seconds(y.Age), LeftSeconds: seconds(y.Left)})
	}
	out.Warnings = append(out.Warnings, p.Warnings...)
	if p.Refused != nil {
		out.Refused = p.Refused.Error()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func seconds(d time.Duration) int64 { return int64(d.Round(time.Second) / time.Second) }
