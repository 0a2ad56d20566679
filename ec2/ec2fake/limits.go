package ec2fake

// Limits are the networking limits EC2 publishes for an instance type: how
// many ENIs can be attached and how many IPv4 address slots each ENI has. The
// slot count includes the ENI's primary address; with prefix delegation each
// /28 prefix takes one slot, exactly as in real EC2.
type Limits struct {
	MaxENIs    int `json:"maxENIs"`
	IPv4PerENI int `json:"ipv4PerENI"`
	// VCPUs is VCpuInfo.DefaultVCpus (0: not reported).
	VCPUs int `json:"vcpus,omitempty"`
	// CardENIs is the ENI limit of the default network card on types with
	// several cards (p5.48xlarge: 64 in all, 2 on card 0); 0 means MaxENIs.
	// AttachNetworkInterface's NetworkCardIndex picks the card; each card
	// takes CardENIs (the last one the rest), and device indexes count per
	// card.
	CardENIs int `json:"cardENIs,omitempty"`
}

// cardENIs is how many ENIs the default network card takes.
func (l Limits) cardENIs() int {
	if l.CardENIs > 0 {
		return l.CardENIs
	}
	return l.MaxENIs
}

// cards is the number of network cards: the default one, and as many more
// as it takes to hold the rest of MaxENIs at CardENIs each.
func (l Limits) cards() int { return (l.MaxENIs + l.cardENIs() - 1) / l.cardENIs() }

// perCard is how many ENIs card i takes.
func (l Limits) perCard(i int) int { return min(l.cardENIs(), l.MaxENIs-i*l.cardENIs()) }

// defaultLimits is a constant table of real EC2 values (DescribeInstanceTypes
// NetworkInfo as of 2025) for the types tests and demos commonly use.
// Config.Limits can add or override entries.
var defaultLimits = map[string]Limits{
	"t3.nano":     {MaxENIs: 2, IPv4PerENI: 2, VCPUs: 2},
	"t3.micro":    {MaxENIs: 2, IPv4PerENI: 2, VCPUs: 2},
	"t3.small":    {MaxENIs: 3, IPv4PerENI: 4, VCPUs: 2},
	"t3.medium":   {MaxENIs: 3, IPv4PerENI: 6, VCPUs: 2},
	"t3.large":    {MaxENIs: 3, IPv4PerENI: 12, VCPUs: 2},
	"t3.xlarge":   {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4},
	"t3.2xlarge":  {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 8},
	"m5.large":    {MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2},
	"m5.xlarge":   {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4},
	"m5.2xlarge":  {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 8},
	"m5.4xlarge":  {MaxENIs: 8, IPv4PerENI: 30, VCPUs: 16},
	"c5.large":    {MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2},
	"c5.xlarge":   {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4},
	"c5.2xlarge":  {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 8},
	"c5.4xlarge":  {MaxENIs: 8, IPv4PerENI: 30, VCPUs: 16},
	"c5.18xlarge": {MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72},
	"m6i.large":   {MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2},
	"m6i.xlarge":  {MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4},
	"r5.large":    {MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2},
	"m5.24xlarge": {MaxENIs: 15, IPv4PerENI: 50, VCPUs: 96},
	"p5.48xlarge": {MaxENIs: 64, IPv4PerENI: 50, VCPUs: 192, CardENIs: 2},
}

// DefaultLimits returns a copy of the built-in instance type table.
func DefaultLimits() map[string]Limits {
	out := make(map[string]Limits, len(defaultLimits))
	for k, v := range defaultLimits {
		out[k] = v
	}
	return out
}
