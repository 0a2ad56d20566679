package ec2fake

// Limits are the networking limits EC2 publishes for an instance type: how
// many ENIs can be attached and how many IPv4 address slots each ENI has. The
// slot count includes the ENI's primary address; with prefix delegation each
// /28 prefix takes one slot, exactly as in real EC2.
type Limits struct {
	MaxENIs    int `json:"maxENIs"`
	IPv4PerENI int `json:"ipv4PerENI"`
}

// defaultLimits is a constant table of real EC2 values (DescribeInstanceTypes
// NetworkInfo as of 2025) for the types tests and demos commonly use.
// Config.Limits can add or override entries.
var defaultLimits = map[string]Limits{
	"t3.nano":     {MaxENIs: 2, IPv4PerENI: 2},
	"t3.micro":    {MaxENIs: 2, IPv4PerENI: 2},
	"t3.small":    {MaxENIs: 3, IPv4PerENI: 4},
	"t3.medium":   {MaxENIs: 3, IPv4PerENI: 6},
	"t3.large":    {MaxENIs: 3, IPv4PerENI: 12},
	"t3.xlarge":   {MaxENIs: 4, IPv4PerENI: 15},
	"t3.2xlarge":  {MaxENIs: 4, IPv4PerENI: 15},
	"m5.large":    {MaxENIs: 3, IPv4PerENI: 10},
	"m5.xlarge":   {MaxENIs: 4, IPv4PerENI: 15},
	"m5.2xlarge":  {MaxENIs: 4, IPv4PerENI: 15},
	"m5.4xlarge":  {MaxENIs: 8, IPv4PerENI: 30},
	"c5.large":    {MaxENIs: 3, IPv4PerENI: 10},
	"c5.xlarge":   {MaxENIs: 4, IPv4PerENI: 15},
	"c5.2xlarge":  {MaxENIs: 4, IPv4PerENI: 15},
	"c5.4xlarge":  {MaxENIs: 8, IPv4PerENI: 30},
	"m6i.large":   {MaxENIs: 3, IPv4PerENI: 10},
	"m6i.xlarge":  {MaxENIs: 4, IPv4PerENI: 15},
	"r5.large":    {MaxENIs: 3, IPv4PerENI: 10},
	"m5.24xlarge": {MaxENIs: 15, IPv4PerENI: 50},
}

// DefaultLimits returns a copy of the built-in instance type table.
func DefaultLimits() map[string]Limits {
	out := make(map[string]Limits, len(defaultLimits))
	for k, v := range defaultLimits {
		out[k] = v
	}
	return out
}
