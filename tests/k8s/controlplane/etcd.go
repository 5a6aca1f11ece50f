package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd starts a single-member embedded etcd server and blocks until SIGTERM/SIGINT.
// Only the handful of flags the test fixture needs are supported.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "default.etcd", "data directory")
	clientURL := fs.String("listen-client-urls", "http://127.0.0.1:2379", "client URL (one)")
	peerURL := fs.String("listen-peer-urls", "http://127.0.0.1:2380", "peer URL (one)")
	quota := fs.Int64("quota-backend-bytes", 2<<30, "backend quota in bytes")
	unsafeNoFsync := fs.Bool("unsafe-no-fsync", true, "skip fsync (test clusters only)")
	logLevel := fs.String("log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad --listen-client-urls:", err)
		return 2
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad --listen-peer-urls:", err)
		return 2
	}

	cfg := embed.NewConfig()
	cfg.Name = "tfk-test"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.QuotaBackendBytes = *quota
	cfg.UnsafeNoFsync = *unsafeNoFsync
	cfg.LogLevel = *logLevel
	// etcdmain's flag defaults; embed.NewConfig leaves this one at 0, which logs every request.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.Logger = "zap"
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd start:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd ready, serving client requests on", cu.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd took too long to start")
		return 1
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintln(os.Stderr, "etcd: got", s, "- stopping")
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd error:", err)
		return 1
	}
}
