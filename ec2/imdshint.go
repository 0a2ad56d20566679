package ec2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"syscall"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// IMDSHintError adds to a failed instance metadata read what usually
// causes it, so an operator is not left with a raw SDK error.
type IMDSHintError struct {
	Err  error
	Hint string
}

func (e *IMDSHintError) Error() string { return e.Err.Error() + " (" + e.Hint + ")" }
func (e *IMDSHintError) Unwrap() error { return e.Err }

// hopLimitHint is what a lost IMDSv2 token reply means in practice.
const hopLimitHint = "from a container or another network namespace, an IMDS hop limit of 1 drops the token reply: " +
	"run eni-cni in the host network namespace, or raise it with " +
	"`aws ec2 modify-instance-metadata-options --instance-id <id> --http-put-response-hop-limit 2`"

// ExplainIMDS wraps err, an IMDS read failure, with its likely causes.
// endpoint is the configured imdsEndpoint ("" for the environment or the
// link-local default).
func ExplainIMDS(err error, endpoint string) error {
	if err == nil {
		return nil
	}
	var hinted *IMDSHintError
	if errors.As(err, &hinted) {
		return err
	}
	where := "the link-local IMDS"
	switch {
	case endpoint != "":
		where = "imdsEndpoint " + endpoint
	case os.Getenv(EnvIMDSEndpoint) != "":
		where = EnvIMDSEndpoint + "=" + os.Getenv(EnvIMDSEndpoint)
	}
	var hint string
	var re *smithyhttp.ResponseError
	var ne net.Error
	err0 := err
	err = withTokenCause(err)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		hint = fmt.Sprintf("nothing answers at %s: not an EC2 instance, IMDS disabled (http-endpoint), or a wrong imdsEndpoint / %s", where, EnvIMDSEndpoint)
	case errors.As(err, &re) && re.HTTPStatusCode() == http.StatusUnauthorized:
		hint = "IMDSv2 token missing or rejected; when the token request timed out first, " + hopLimitHint
	case errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden:
		hint = "IMDS refused the request: the instance metadata endpoint or its tags access is disabled, or a proxy is in the way (NO_PROXY must include 169.254.169.254)"
	case errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound:
		hint = fmt.Sprintf("%s does not serve this path: is it an EC2 instance metadata service?", where)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		hint = fmt.Sprintf("no answer in time from %s: not an EC2 instance, or %s", where, hopLimitHint)
	case errors.Is(err, ErrIMDS):
		// The SDK hides some replies (a 401 after a lost token reply
		// arrives wrapped in a type without Unwrap): list every usual cause.
		hint = fmt.Sprintf("likely causes: not an EC2 instance; a wrong imdsEndpoint / %s (now %s); or %s", EnvIMDSEndpoint, where, hopLimitHint)
	default:
		return err0
	}
	return &IMDSHintError{Err: err0, Hint: hint}
}

// withTokenCause adds the cause of a failed IMDSv2 token request to err's
// chain. Without the IMDSv1 fallback the SDK returns that failure wrapped
// in its retryableError, which has no Unwrap method; its exported Err
// field holds the cause (a refused connection, a timeout, a status).
func withTokenCause(err error) error {
	var r interface{ RetryableError() bool }
	if !errors.As(err, &r) {
		return err
	}
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return err
	}
	f := v.Elem().FieldByName("Err")
	if !f.IsValid() || !f.CanInterface() {
		return err
	}
	if cause, ok := f.Interface().(error); ok && cause != nil {
		return errors.Join(err, cause)
	}
	return err
}
