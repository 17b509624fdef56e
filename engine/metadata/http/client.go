package http

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
	"github.com/kvferry/kvferry/engine/peerauth"
)

// Client timeouts as Mooncake's HTTP metadata plugin sets them
// (specs/mooncake.md §2.4): 3 s per request, 1.5 s to connect.
const (
	DefaultTimeout        = 3 * time.Second
	DefaultConnectTimeout = 1500 * time.Millisecond
)

// DefaultMaxValueBytes caps a value read from or written to the service.
const DefaultMaxValueBytes = 64 << 20

// Config configures a Client. URL is required; the zero value of every
// other field works.
type Config struct {
	// URL is the metadata endpoint, e.g. "http://10.0.0.1:8080/metadata";
	// the key is appended as "?key=<escaped>" ("&key=" when URL already has
	// a query).
	URL string
	// Timeout bounds each request from dial to the last body byte; zero
	// means DefaultTimeout.
	Timeout time.Duration
	// ConnectTimeout bounds the TCP connect (and TLS handshake); zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxValueBytes caps a value; zero means DefaultMaxValueBytes.
	MaxValueBytes int64
	// TLS configures https URLs; nil means the system defaults.
	TLS *tls.Config
	// Auth, when set, authenticates every connection to the server with
	// the cluster key (peerauth, RoleMetadata) before the first request.
	Auth *peerauth.Keys
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if _, err := ParseURL(c.URL); err != nil {
		return err
	}
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("http metadata config: Timeout %v is negative", c.Timeout)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("http metadata config: ConnectTimeout %v is negative", c.ConnectTimeout)
	case c.MaxValueBytes < 0:
		return fmt.Errorf("http metadata config: MaxValueBytes %d is negative", c.MaxValueBytes)
	}
	return nil
}

// ParseURL checks a metadata URL: scheme http or https, a host, no
// fragment and no user information (connstr.ParseHTTPURL).
func ParseURL(raw string) (*url.URL, error) { return connstr.ParseHTTPURL(raw) }

// StatusError is a reply other than 200.
type StatusError struct {
	// Op is "GET", "PUT" or "DELETE".
	Op string
	// Key is the metadata key.
	Key string
	// URL is the service endpoint (without the key).
	URL string
	// Code is the HTTP status code.
	Code int
	// Body is the start of the reply body.
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("http metadata %s %q at %s: status %d: %q", e.Op, e.Key, e.URL, e.Code, e.Body)
}

// Is makes a 404 match metadata.ErrNotFound, a 502/503/504 match
// metadata.ErrUnavailable, and a 400 to a PUT of an rpc_meta key match
// metadata.ErrConflict (the master store's duplicate rule, §3.4).
func (e *StatusError) Is(target error) bool {
	switch target {
	case metadata.ErrNotFound:
		return e.Code == nethttp.StatusNotFound
	case metadata.ErrUnavailable:
		return e.Code == nethttp.StatusBadGateway || e.Code == nethttp.StatusServiceUnavailable ||
			e.Code == nethttp.StatusGatewayTimeout
	case metadata.ErrConflict:
		return e.Code == nethttp.StatusBadRequest && e.Op == nethttp.MethodPut && strings.Contains(e.Key, "rpc_meta")
	}
	return false
}

// Client is a metadata.KV over Mooncake's HTTP metadata protocol. It never
// uses a proxy from the environment (http_proxy breaks Mooncake's HTTP
// metadata, specs/mooncake.md §9.8).
type Client struct {
	cfg  Config
	base string // URL plus "?key=" or "&key="
	tr   *nethttp.Transport
	hc   *nethttp.Client
	once sync.Once
}

var _ metadata.KV = (*Client)(nil)

// NewClient returns a client for cfg.URL. It does not contact the service.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 15 * time.Second}
	tr := &nethttp.Transport{
		Proxy:                 nil,
		DialContext:           peerauth.Dialer(dialer, cfg.Auth, peerauth.RoleMetadata),
		TLSClientConfig:       cfg.TLS,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	sep := "?key="
	if strings.Contains(cfg.URL, "?") {
		sep = "&key="
	}
	return &Client{
		cfg:  cfg,
		base: cfg.URL + sep,
		tr:   tr,
		hc:   &nethttp.Client{Transport: tr, Timeout: cfg.Timeout},
	}, nil
}

// URL returns the service endpoint.
func (c *Client) URL() string { return c.cfg.URL }

// Get returns the value of key, or an error matching metadata.ErrNotFound.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	return c.do(ctx, nethttp.MethodGet, key, nil)
}

// Put stores value under key.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	if int64(len(value)) > c.cfg.MaxValueBytes {
		return fmt.Errorf("http metadata PUT %q: value of %d bytes exceeds %d", key, len(value), c.cfg.MaxValueBytes)
	}
	_, err := c.do(ctx, nethttp.MethodPut, key, value)
	return err
}

// Delete removes key; a missing key gives an error matching
// metadata.ErrNotFound (as Mooncake's master store answers 404).
func (c *Client) Delete(ctx context.Context, key string) error {
	_, err := c.do(ctx, nethttp.MethodDelete, key, nil)
	return err
}

// Probe checks that the service answers HTTP at all (any status code).
func (c *Client) Probe(ctx context.Context) error {
	_, err := c.do(ctx, nethttp.MethodGet, metadata.KeyRoot, nil)
	var se *StatusError
	if err == nil || errors.As(err, &se) && !errors.Is(err, metadata.ErrUnavailable) {
		return nil
	}
	return err
}

// Close drops idle connections; a second Close is harmless.
func (c *Client) Close() error {
	c.once.Do(c.tr.CloseIdleConnections)
	return nil
}

// do runs one request; a request that fails on a reused keep-alive
// connection before any reply (the server closed it while idle) is sent
// once more on a fresh connection.
func (c *Client) do(ctx context.Context, method, key string, body []byte) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("http metadata %s: empty key", method)
	}
	target := c.base + EscapeKey(key)
	for attempt := 0; ; attempt++ {
		data, reused, err := c.roundTrip(ctx, method, target, key, body)
		if err == nil {
			return data, nil
		}
		var se *StatusError
		if attempt == 0 && reused && !errors.As(err, &se) && ctx.Err() == nil && !isTimeout(err) {
			c.cfg.Logger.Debug("http metadata retry on fresh connection", "op", method, "err", err)
			continue
		}
		return nil, err
	}
}

func (c *Client) roundTrip(ctx context.Context, method, target, key string, body []byte) (data []byte, reused bool, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
	req, err := nethttp.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, target, rd)
	if err != nil {
		return nil, false, fmt.Errorf("http metadata %s %q: %w", method, key, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, reused, fmt.Errorf("http metadata %s %q at %s: %w", method, key, c.cfg.URL, ctx.Err())
		}
		return nil, reused, fmt.Errorf("http metadata %s %q at %s: %w: %w", method, key, c.cfg.URL, metadata.ErrUnavailable, unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxValueBytes+1))
	if err != nil {
		return nil, reused, fmt.Errorf("http metadata %s %q at %s: read reply: %w: %w", method, key, c.cfg.URL, metadata.ErrUnavailable, unwrapURLError(err))
	}
	if int64(len(data)) > c.cfg.MaxValueBytes {
		return nil, reused, fmt.Errorf("http metadata %s %q at %s: reply exceeds %d bytes", method, key, c.cfg.URL, c.cfg.MaxValueBytes)
	}
	if resp.StatusCode != nethttp.StatusOK {
		if len(data) > 200 {
			data = data[:200]
		}
		return nil, reused, &StatusError{Op: method, Key: key, URL: c.cfg.URL, Code: resp.StatusCode, Body: string(data)}
	}
	return data, reused, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// EscapeKey percent-encodes every byte of key except the RFC 3986
// unreserved characters, as curl_easy_escape does for Mooncake's client.
func EscapeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) * 3)
	for i := 0; i < len(key); i++ {
		ch := key[i]
		if 'A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' ||
			ch == '-' || ch == '.' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}
