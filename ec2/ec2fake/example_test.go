package ec2fake_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// Point the real SDK clients at the fake: explicit endpoints, dummy static
// credentials, any region.
func ExampleNew() {
	srv, err := ec2fake.New(ec2fake.Config{InstanceType: "t3.medium"})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx := context.Background()
	api := ec2.New(ec2.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.EC2URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	})
	meta := imds.New(imds.Options{Endpoint: srv.IMDSURL()})

	primary := srv.PrimaryENI()
	out, err := api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId:             &primary.ID,
		SecondaryPrivateIpAddressCount: aws.Int32(2),
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := meta.GetMetadata(ctx, &imds.GetMetadataInput{
		Path: "network/interfaces/macs/" + primary.MAC + "/local-ipv4s",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer res.Content.Close()
	body, _ := io.ReadAll(res.Content)

	fmt.Println("assigned:", len(out.AssignedPrivateIpAddresses))
	fmt.Println("IMDS local-ipv4s:", len(strings.Split(string(body), "\n")))
	fmt.Println("EC2 calls:", srv.Calls())
	// Output:
	// assigned: 2
	// IMDS local-ipv4s: 3
	// EC2 calls: map[AssignPrivateIpAddresses:1]
}
