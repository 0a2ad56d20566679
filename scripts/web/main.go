// Command web is the tiny HTTP server of the kubeadm quick start
// (scripts/e2e/kubeadm.sh): a static binary in an image built offline, so a
// pod started with `kubectl run` answers on its eni-cni address without a
// registry. GET / answers "<hostname> <local address> <client address>".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type localAddrKey struct{}

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
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			local, _ := r.Context().Value(localAddrKey{}).(string)
			fmt.Fprintf(w, "%s %s %s\n", host, local, r.RemoteAddr)
		}),
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
