package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/multicache/multicache/cmd/multicache/kubeprinters"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/pkg/server"
)

type serveFlags struct {
	config, listen, tokenFile, logFormat, logLevel string
	kubeconfigs, contexts, excludes, resources     []string
	allowInsecure                                  bool
}

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: cache the fleet and serve the HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML config file (flags override it)")
	fl.StringArrayVar(&f.kubeconfigs, "kubeconfig", nil, "kubeconfig file (repeatable; default $KUBECONFIG or ~/.kube/config)")
	fl.StringArrayVar(&f.contexts, "context", nil, "include contexts matching this glob (repeatable)")
	fl.StringArrayVar(&f.excludes, "exclude-context", nil, "exclude contexts matching this glob (repeatable)")
	fl.StringArrayVar(&f.resources, "resource", nil, "resource to cache: plural, kind, short name or group/version/resource (repeatable)")
	fl.StringVar(&f.listen, "listen", "", "listen address (default 127.0.0.1:8080)")
	fl.StringVar(&f.tokenFile, "token-file", "", "require a bearer token from this file (one per line)")
	fl.BoolVar(&f.allowInsecure, "allow-insecure", false, "allow listening beyond loopback without auth")
	fl.StringVar(&f.logFormat, "log-format", "", "json or console")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	return cmd
}

// load reads the config file if any, then applies the flags that were set.
func (f *serveFlags) load(cmd *cobra.Command) (*config.Config, error) {
	cfg := &config.Config{}
	if f.config != "" {
		c, err := config.Read(f.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	fl := cmd.Flags()
	if fl.Changed("kubeconfig") {
		cfg.Kubeconfig.Paths = f.kubeconfigs
	}
	if fl.Changed("context") {
		cfg.Kubeconfig.Include = f.contexts
	}
	if fl.Changed("exclude-context") {
		cfg.Kubeconfig.Exclude = f.excludes
	}
	if fl.Changed("resource") {
		cfg.Resources = nil
		for _, r := range f.resources {
			cfg.Resources = append(cfg.Resources, config.Resource{Name: r})
		}
	}
	if f.listen != "" {
		cfg.Server.Listen = f.listen
	}
	if f.tokenFile != "" {
		cfg.Server.Auth = &config.Auth{TokenFile: f.tokenFile}
	}
	if f.allowInsecure {
		cfg.Server.AllowInsecure = true
	}
	if f.logFormat != "" {
		cfg.Logging.Format = f.logFormat
	}
	if f.logLevel != "" {
		cfg.Logging.Level = f.logLevel
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		if f.config != "" {
			return nil, fmt.Errorf("config %s: %w", f.config, err)
		}
		return nil, err
	}
	return cfg, nil
}

func newLogger(c config.Logging) (*zap.Logger, error) {
	var zc zap.Config
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	} else {
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("logging.level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.DisableStacktrace = true
	return zc.Build()
}

func serve(ctx context.Context, cfg *config.Config) error {
	log, err := newLogger(cfg.Logging)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	// client-go logs through klog; send it to the same place, structured.
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))

	specs, err := cfg.ResourceSpecs()
	if err != nil {
		return err
	}
	src, err := clusterset.NewKubeconfig(cfg.KubeconfigOptions())
	if err != nil {
		return err
	}
	// Fail fast when the source yields nothing usable; later reload errors only get logged.
	if clusters, err := src.Load(); err != nil {
		if len(clusters) == 0 {
			return err
		}
		log.Warn("some kubeconfig contexts are unusable", zap.Error(err))
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: specs, Logger: log, QPS: cfg.QPS, Burst: cfg.Burst, UserAgent: "multicache/" + version})
	if err != nil {
		return err
	}
	var tokens []string
	if cfg.Server.Auth != nil {
		if tokens, err = server.ReadTokenFile(cfg.Server.Auth.TokenFile); err != nil {
			return fmt.Errorf("server.auth.tokenFile: %w", err)
		}
	}
	sopts := cfg.ServerOptions()
	sopts.Registry, sopts.Logger, sopts.Tokens = reg, log, tokens
	sopts.Tables = kubeprinters.New()
	srv, err := server.New(sopts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("server.listen: %w", err)
	}
	// Request contexts derive from base, so cancelling it ends open watches at shutdown.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	regCtx, stopReg := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = reg.Start(regCtx)
	}()
	serveErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		var err error
		if cfg.Server.TLS != nil {
			err = hs.ServeTLS(ln, cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile)
		} else {
			err = hs.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	log.Info("serving", zap.String("listen", ln.Addr().String()), zap.Bool("tls", cfg.Server.TLS != nil), zap.Bool("auth", len(tokens) > 0), zap.Strings("resources", reg.Resources()))
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		log.Error("server failed", zap.Error(err))
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	endRequests()
	_ = hs.Shutdown(shutdownCtx)
	_ = hs.Close()
	stopReg()
	wg.Wait()
	return err
}
