// Command web is the tiny HTTP server of the kubeadm quick start
// (scripts/e2e/kubeadm.sh): a static binary in an image built offline, so a
// pod started with `kubectl run` answers on its eni-cni address without a
// registry. GET / answers "<hostname> <local address> <client address>";
// GET /resolve?name=N answers N's addresses as the pod's resolver finds
// them (cluster DNS: the pod reaches CoreDNS through its Service). A request
// body is read to its end first and its length appended to the answer:
// net/http closes a connection whose handler left more than 256 kB unread,
// which would cut an upload that tests the path short.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type localAddrKey struct{}

func mux(host string) *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(localAddrKey{}).(string)
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, fmt.Sprintf("read body: %v after %d bytes", err, n), http.StatusBadRequest)
			return
		}
		if n > 0 {
			fmt.Fprintf(w, "%s %s %s %d\n", host, local, r.RemoteAddr, n)
			return
		}
		fmt.Fprintf(w, "%s %s %s\n", host, local, r.RemoteAddr)
	})
	m.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, r.URL.Query().Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, strings.Join(addrs, " "))
	})
	return m
}

func main() {
	addr := flag.String("listen", ":8080", "address to listen on")
	flag.Parse()
	host, _ := os.Hostname()
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, localAddrKey{}, c.LocalAddr().String())
		},
		Handler: mux(host),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("web: listening on %s", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("web: %v", err)
	}
}
