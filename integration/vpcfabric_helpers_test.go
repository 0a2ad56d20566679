package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/ec2/ec2fake/vpcfabric"
)

// The VPC fabric (package vpcfabric) makes the EC2 tests' "vpc" namespace
// behave as the VPC does for the node's ENIs: a router that delivers each
// address EC2 has assigned to an ENI (and each of its prefixes) to that
// ENI's link, answers for the subnets' gateways, and enforces the
// source/destination check: a packet that comes from ENI X with a source
// that is not one of X's addresses is dropped, and counted. It follows the
// fake's changes itself. A "client" namespace stands for anything else in
// the VPC (another instance, a load balancer in instance mode) and reaches
// the node through the router. MTU 9001 everywhere.
const (
	fabricClientNet = "10.98.32.0/24" // in the VPC (10.98.0.0/16), no ENI of the node's there
	fabricClientIP  = "10.98.32.10"
	fabricMTU       = vpcfabric.MTU
)

// vpcFabric is the router (the ec2Node's vpc namespace) and the client.
type vpcFabric struct {
	en       *ec2Node
	fab      *vpcfabric.Fabric
	rh       *netlink.Handle // in the router
	client   *netNS
	clientIP netip.Addr
}

// newVPCFabric turns en's vpc namespace into the router, with the links
// the node has so far as the ports of their ENIs, and adds the client.
func newVPCFabric(t *testing.T, en *ec2Node) *vpcFabric {
	t.Helper()
	fab, err := vpcfabric.New(en.fake, vpcfabric.Config{Router: en.vpc.path()})
	if err != nil {
		t.Fatalf("vpc fabric: %v", err)
	}
	t.Cleanup(func() {
		if err := fab.Err(); err != nil {
			t.Errorf("vpc fabric: %v", err)
		}
		fab.Close()
	})
	f := &vpcFabric{en: en, fab: fab, rh: openHandle(t, en.vpc.path()), client: newNetNS(t), clientIP: netip.MustParseAddr(fabricClientIP)}
	t.Cleanup(f.rh.Close)
	en.mu.Lock()
	links := maps.Clone(en.links)
	en.mu.Unlock()
	for _, e := range en.fake.ENIs() {
		name, ok := links[e.MAC]
		if !ok {
			continue
		}
		if err := fab.Adopt(e.ID, name+"p"); err != nil {
			t.Fatalf("vpc fabric: %v", err)
		}
		if e.DeviceIndex == 0 {
			// The node's primary link: the instance's own, at the VPC's MTU.
			if err := en.h.LinkSetMTU(linkIn(t, en.h, name), fabricMTU); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.clientLink(t)
	return f
}

// clientLink wires the client: cl0 (10.98.32.10/24, default via .1) to
// the router's "client" link.
func (f *vpcFabric) clientLink(t *testing.T) {
	t.Helper()
	ch := openHandle(t, f.client.path())
	defer ch.Close()
	clientNS, err := netns.GetFromPath(f.client.path())
	if err != nil {
		t.Fatal(err)
	}
	defer clientNS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "client", MTU: fabricMTU}, PeerName: "cl0", PeerNamespace: netlink.NsFd(clientNS)}
	if err := f.rh.LinkAdd(veth); err != nil {
		t.Fatalf("router: create the client link: %v", err)
	}
	subnet := netip.MustParsePrefix(fabricClientNet)
	gw := subnet.Addr().Next()
	linkUp(t, f.rh, "client", netip.PrefixFrom(gw, subnet.Bits()))
	linkUp(t, ch, "lo", netip.Prefix{})
	linkUp(t, ch, "cl0", netip.PrefixFrom(f.clientIP, subnet.Bits()))
	if err := ch.LinkSetMTU(linkIn(t, ch, "cl0"), fabricMTU); err != nil {
		t.Fatal(err)
	}
	if err := ch.RouteAdd(&netlink.Route{LinkIndex: linkIn(t, ch, "cl0").Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		t.Fatalf("client: default via %s: %v", gw, err)
	}
}

// counters reads a router link's source check: packets let through per
// source, and packets dropped.
func (f *vpcFabric) counters(t *testing.T, port string) (passed map[netip.Prefix]int, dropped int) {
	t.Helper()
	c, err := f.fab.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Ports {
		if p.Port == port {
			return p.PassedFrom, p.Dropped
		}
	}
	t.Fatalf("router: no port %s (%+v)", port, c.Ports)
	return nil, 0
}

// drops is what the source checks of all ENI links have dropped.
func (f *vpcFabric) drops(t *testing.T) map[string]int {
	t.Helper()
	c, err := f.fab.Counters()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range c.Ports {
		out[p.Port] = p.Dropped
	}
	return out
}

// ---------------------------------------------------------------- TCP

// listenIn listens on TCP port in the namespace at nsPath, closed in
// t.Cleanup.
func listenIn(t *testing.T, nsPath string, port int) net.Listener {
	t.Helper()
	var l net.Listener
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", ":"+strconv.Itoa(port))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %d in %s: %v", port, nsPath, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// serveTCP listens on port in the namespace at nsPath and answers each
// connection with one line: "<local address> <remote address>", so the
// caller sees which address the server saw it come from. Closed in
// t.Cleanup or by the function it returns: a closed listener also stops
// the SYN-ACK retransmits of connections whose replies the VPC dropped,
// which would otherwise be counted later.
func serveTCP(t *testing.T, nsPath string, port int) (stop func()) {
	t.Helper()
	l := listenIn(t, nsPath, port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", c.LocalAddr(), c.RemoteAddr())
			c.Close()
		}
	}()
	return func() { l.Close() }
}

// dialTCP connects from the namespace at nsPath to to and returns the
// server's line. A reply the VPC drops shows as a timeout.
func dialTCP(nsPath string, to netip.AddrPort) (string, error) {
	var line string
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", to.String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

// serveSink listens on port in the namespace at nsPath, reads each
// connection to its end and answers with the number of bytes it read.
func serveSink(t *testing.T, nsPath string, port int) {
	t.Helper()
	l := listenIn(t, nsPath, port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(uploadTimeout))
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "%d\n", n)
			}()
		}
	}()
}

// serveWeb runs a web server on port in the namespace at nsPath that
// answers every request at once without reading its body.
func serveWeb(t *testing.T, nsPath string, port int) {
	t.Helper()
	l := listenIn(t, nsPath, port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })}
	t.Cleanup(func() { srv.Close() })
	go srv.Serve(l)
}

// postFrom posts size bytes from the namespace at nsPath to to; a reset
// mid-body is the server's right, so its outcome is not returned. The
// connection is dialed here, on the thread in the namespace: the
// transport would dial on any thread, in any namespace.
func postFrom(nsPath string, to netip.AddrPort, size int) error {
	var c net.Conn
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) (err error) {
		c, err = net.DialTimeout("tcp4", to.String(), 2*time.Second)
		return err
	})
	if err != nil {
		return err
	}
	dial := func(context.Context, string, string) (net.Conn, error) { return c, nil }
	client := &http.Client{Timeout: uploadTimeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := client.Post("http://"+to.String()+"/", "application/octet-stream", bytes.NewReader(make([]byte, size)))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c.Close()
	return nil
}

// uploadTimeout bounds one upload: megabytes over veths take well under a
// second; a reset or a stalled connection shows as an error or a timeout.
const uploadTimeout = 30 * time.Second

// uploadTCP sends size bytes from the namespace at nsPath to a serveSink
// at to, closes its side and returns the count the server read.
func uploadTCP(nsPath string, to netip.AddrPort, size int) (int, error) {
	var got int
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", to.String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(uploadTimeout))
		if _, err := c.Write(make([]byte, size)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return fmt.Errorf("close write: %w", err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("read the count: %w", err)
		}
		got, err = strconv.Atoi(strings.TrimSpace(line))
		return err
	})
	return got, err
}

// sendInvalidTCP sends, from the namespace at nsPath, one TCP segment from
// src to to that conntrack calls INVALID (SYN and FIN together: no
// connection's), as it calls a segment in flight past the window a reset
// closed. A raw socket: the kernel adds the IP header, with src.
func sendInvalidTCP(nsPath string, src netip.Addr, to netip.AddrPort) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		defer unix.Close(fd)
		seg := make([]byte, 20)
		binary.BigEndian.PutUint16(seg[0:], 40000)
		binary.BigEndian.PutUint16(seg[2:], to.Port())
		binary.BigEndian.PutUint32(seg[4:], 1)
		seg[12] = 5 << 4      // data offset: 5 words, no options
		seg[13] = 0x02 | 0x01 // SYN|FIN
		binary.BigEndian.PutUint16(seg[14:], 1024)
		binary.BigEndian.PutUint16(seg[16:], tcpChecksum(src, to.Addr(), seg))
		sa := &unix.SockaddrInet4{Addr: to.Addr().As4()}
		if err := unix.Sendto(fd, seg, 0, sa); err != nil {
			return fmt.Errorf("send to %s: %w", to, err)
		}
		return nil
	})
}

// tcpChecksum is the TCP checksum of seg (checksum field zero) with the
// IPv4 pseudo-header.
func tcpChecksum(src, dst netip.Addr, seg []byte) uint16 {
	s, d := src.As4(), dst.As4()
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, unix.IPPROTO_TCP, byte(len(seg)>>8), byte(len(seg)))
	var sum uint32
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ---------------------------------------------------------------- small helpers

func sysctls(t *testing.T, nsPath string, kv ...string) {
	t.Helper()
	o, err := runIn(t.Context(), nsPath, nil, nil, append([]string{"sysctl", "-qw"}, kv...)...)
	if err == nil && o.exit != 0 {
		err = fmt.Errorf("sysctl -w %v: %s", kv, o)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func linkIn(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// linkUp sets the link up with addr on it (none if addr is not valid).
func linkUp(t *testing.T, h *netlink.Handle, name string, addr netip.Prefix) {
	t.Helper()
	l := linkIn(t, h, name)
	if addr.IsValid() {
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(addr)}); err != nil {
			t.Fatalf("add %s to %s: %v", addr, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}
