package ec2

import (
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Environment variables the AWS SDKs read for endpoints; honoured here
// because the clients are built without the SDK's config loader (which
// would pull SSO, STS and profile parsing into every plugin exec).
const (
	EnvIMDSEndpoint = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
	EnvEC2Endpoint  = "AWS_ENDPOINT_URL_EC2"
)

// MetadataOption adjusts an IMDS client.
type MetadataOption func(*imds.Options)

// AllowIMDSv1 lets the client fall back to IMDSv1 (no session token) when
// the token request is refused. Off unless the configuration asks for it
// (imdsV1Fallback): IMDSv1 answers any GET, which is what SSRF and
// open-proxy attacks on instance credentials rely on.
func AllowIMDSv1() MetadataOption {
	return func(o *imds.Options) { o.EnableFallback = aws.TrueTernary }
}

// NewMetadataClient returns an IMDSv2 client. endpoint overrides the
// environment, which overrides the link-local default.
func NewMetadataClient(endpoint string, opts ...MetadataOption) *imds.Client {
	return imds.New(metadataOptions(endpoint, 5*time.Second, opts))
}

// NewQuickMetadataClient is for reads inside a CNI call (an empty pool at
// ADD, STATUS): two attempts with short waits, so an unreachable IMDS is
// reported within about a second instead of holding up the runtime.
func NewQuickMetadataClient(endpoint string, opts ...MetadataOption) *imds.Client {
	o := metadataOptions(endpoint, time.Second, opts)
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = 2
		so.MaxBackoff = 100 * time.Millisecond
	})
	o.DisableDefaultMaxBackoff = true
	return imds.New(o)
}

// metadataOptions: IMDSv2 only (the SDK would silently fall back to IMDSv1
// when the token request fails) unless an option allows it.
func metadataOptions(endpoint string, timeout time.Duration, opts []MetadataOption) imds.Options {
	if endpoint == "" {
		endpoint = os.Getenv(EnvIMDSEndpoint)
	}
	o := imds.Options{
		Endpoint:          endpoint,
		ClientEnableState: imds.ClientEnabled,
		EnableFallback:    aws.FalseTernary,
		HTTPClient:        awshttp.NewBuildableClient().WithTimeout(timeout),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// NewAPI returns an EC2 client that waits out throttling with jittered
// exponential back-off (NewRetryer) and bounds each call. Credentials come
// from the environment if set, else from the instance role through IMDS.
func NewAPI(endpoint, region string, md *imds.Client, optFns ...func(*ec2.Options)) *ec2.Client {
	if endpoint == "" {
		endpoint = os.Getenv(EnvEC2Endpoint)
	}
	var creds aws.CredentialsProvider = ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = md })
	if id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		creds = credentials.NewStaticCredentialsProvider(id, secret, os.Getenv("AWS_SESSION_TOKEN"))
	}
	opts := ec2.Options{
		Region:      region,
		Credentials: aws.NewCredentialsCache(creds),
		HTTPClient:  awshttp.NewBuildableClient().WithTimeout(20 * time.Second),
		Retryer:     NewRetryer(DefaultBackoff),
	}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	return ec2.New(opts, optFns...)
}
