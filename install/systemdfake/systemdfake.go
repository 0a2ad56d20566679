// Package systemdfake is a fake systemd manager for tests: it listens on a
// private socket as systemd does on /run/systemd/private, speaks the D-Bus
// wire protocol (the SASL EXTERNAL handshake, then binary messages) and
// records the org.freedesktop.systemd1.Manager calls it gets, so the real
// client in package install is exercised without a running systemd. It
// answers StartUnit and StopUnit with a job path, Reload with nothing, and
// StopUnit of a unit it was told is unknown with systemd's NoSuchUnit
// error.
package systemdfake

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// Call is one method call the fake got.
type Call struct {
	Method string // member, e.g. "StartUnit"
	Args   []string
}

func (c Call) String() string { return c.Method + "(" + strings.Join(c.Args, ", ") + ")" }

// Server is a fake systemd on a unix socket.
type Server struct {
	Path string
	ln   net.Listener

	mu      sync.Mutex
	calls   []Call
	conns   int
	unknown map[string]bool
	fail    map[string]string // method -> D-Bus error name
	open    map[net.Conn]bool
	wg      sync.WaitGroup
}

// Start listens on root/run/systemd/private (creating the directories and
// run/systemd/system, the mark of a booted systemd).
func Start(root string) (*Server, error) {
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(root, "run/systemd/private")
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, err
	}
	s := &Server{Path: p, ln: ln, unknown: map[string]bool{}, fail: map[string]string{}, open: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Unknown makes StopUnit of unit answer NoSuchUnit, as systemd does for a
// unit it has not loaded.
func (s *Server) Unknown(unit string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unknown[unit] = true
}

// Fail makes every call of method fail with the D-Bus error name.
func (s *Server) Fail(method, errorName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[method] = errorName
}

// Calls returns the calls so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Conns is how many clients connected.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Close stops listening, closes the connections and waits for them.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.open[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(c)
			c.Close()
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
		}()
	}
}

func (s *Server) serve(c net.Conn) {
	r := bufio.NewReader(c)
	if err := handshake(r, c); err != nil {
		return
	}
	serial := uint32(1)
	for {
		msg, err := dbus.DecodeMessage(r)
		if err != nil {
			return
		}
		if msg.Type != dbus.TypeMethodCall {
			continue
		}
		reply := s.handle(msg)
		var b bytes.Buffer
		if err := reply.EncodeTo(&b, binary.LittleEndian); err != nil {
			return
		}
		// The serial is the sender's; Message keeps it unexported.
		out := b.Bytes()
		binary.LittleEndian.PutUint32(out[8:12], serial)
		serial++
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// handshake is the server side of SASL EXTERNAL as godbus and sd-bus do it.
func handshake(r *bufio.Reader, w net.Conn) error {
	if b, err := r.ReadByte(); err != nil || b != 0 {
		return errors.New("no leading NUL byte")
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			return errors.New("empty line")
		}
		var answer string
		switch {
		case f[0] == "AUTH" && len(f) == 1:
			answer = "REJECTED EXTERNAL"
		case f[0] == "AUTH" && f[1] == "EXTERNAL" && len(f) == 2:
			answer = "DATA"
		case f[0] == "AUTH" && f[1] == "EXTERNAL", f[0] == "DATA":
			answer = "OK 0123456789abcdef0123456789abcdef"
		case f[0] == "NEGOTIATE_UNIX_FD":
			answer = "AGREE_UNIX_FD"
		case f[0] == "BEGIN":
			return nil
		default:
			answer = "ERROR"
		}
		if _, err := fmt.Fprintf(w, "%s\r\n", answer); err != nil {
			return err
		}
	}
}

func (s *Server) handle(msg *dbus.Message) *dbus.Message {
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	iface, _ := msg.Headers[dbus.FieldInterface].Value().(string)
	call := Call{Method: member}
	for _, a := range msg.Body {
		call.Args = append(call.Args, fmt.Sprint(a))
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	errName := s.fail[member]
	if member == "StopUnit" && len(call.Args) > 0 && s.unknown[call.Args[0]] {
		errName = "org.freedesktop.systemd1.NoSuchUnit"
	}
	s.mu.Unlock()
	if iface != "org.freedesktop.systemd1.Manager" {
		errName = "org.freedesktop.DBus.Error.UnknownInterface"
	}
	reply := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
	}}
	switch {
	case errName != "":
		reply.Type = dbus.TypeError
		reply.Headers[dbus.FieldErrorName] = dbus.MakeVariant(errName)
		reply.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(""))
		reply.Body = []any{"fake systemd: " + errName}
	case member == "StartUnit" || member == "StopUnit":
		reply.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(dbus.ObjectPath("")))
		reply.Body = []any{dbus.ObjectPath("/org/freedesktop/systemd1/job/1")}
	}
	return reply
}
