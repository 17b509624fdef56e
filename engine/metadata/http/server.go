package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	nethttp "net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kvferry/kvferry/internal/ratelog"
)

// Replies of the REST protocol (specs/mooncake.md §3.4).
const (
	msgUpdated       = "metadata updated"
	msgUnchanged     = "metadata unchanged"
	msgDeleted       = "metadata deleted"
	msgNotFound      = "metadata not found"
	msgKeyRequired   = "metadata key is required"
	msgDuplicateRPC  = "Duplicate rpc_meta key not allowed"
	msgHealthy       = "OK"
	jsonContentType  = "application/json; charset=utf-8"
	rpcMetaSubstring = "rpc_meta"
)

// DefaultPath is where the REST protocol is served.
const DefaultPath = "/metadata"

// Server caps (ServerConfig): a PUT body, a key, the number of entries and
// the bytes of keys and values together.
const (
	DefaultServerMaxValueBytes = 16 << 20
	DefaultServerMaxKeyBytes   = 4096
	DefaultServerMaxEntries    = 1 << 17
	DefaultServerMaxTotalBytes = 256 << 20
	// entryOverheadBytes is charged per entry on top of key and value.
	entryOverheadBytes = 64
)

// snapshotFormat names the snapshot file format.
const snapshotFormat = "kvferry-metadata-snapshot/1"

// ServerConfig configures a Server. The zero value works: an in-memory
// store on DefaultPath whose entries never expire.
type ServerConfig struct {
	// Path is the URL path of the REST protocol; empty means DefaultPath.
	Path string
	// SnapshotPath, when set, is a file that holds every entry: it is read
	// by NewServer, with the change log beside it (SnapshotPath + ".log")
	// replayed over it. Each change is appended to the log and synced
	// before it is acknowledged; when the log outgrows the snapshot, the
	// snapshot is rewritten atomically (temporary file, fsync, rename) and
	// the log emptied. Empty means memory only.
	SnapshotPath string
	// TTL, when positive, drops an entry that was not written (PUT, even
	// with an unchanged body) for that long. Engines re-publish
	// periodically (metadata.KVConfig.RepublishInterval), so a TTL of a few
	// intervals removes dead engines' entries. Zero means never.
	TTL time.Duration
	// MaxValueBytes caps a PUT body; zero means DefaultServerMaxValueBytes.
	MaxValueBytes int64
	// MaxKeyBytes caps a key (DefaultServerMaxKeyBytes), MaxEntries the
	// entries (DefaultServerMaxEntries) and MaxTotalBytes their keys and
	// values together (DefaultServerMaxTotalBytes). A PUT past a cap is
	// answered 413 (key) or 507 (store full) and changes nothing.
	MaxKeyBytes   int
	MaxEntries    int
	MaxTotalBytes int64
	// Logger receives changes (Debug) and failures; nil discards them.
	Logger *slog.Logger
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = DefaultServerMaxValueBytes
	}
	if c.MaxKeyBytes <= 0 {
		c.MaxKeyBytes = DefaultServerMaxKeyBytes
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = DefaultServerMaxEntries
	}
	if c.MaxTotalBytes <= 0 {
		c.MaxTotalBytes = DefaultServerMaxTotalBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c ServerConfig) Validate() error {
	switch {
	case c.Path != "" && !strings.HasPrefix(c.Path, "/"):
		return fmt.Errorf("metadata server config: Path %q does not start with '/'", c.Path)
	case c.Path == "/health":
		return errors.New("metadata server config: Path /health is reserved")
	case c.TTL < 0:
		return fmt.Errorf("metadata server config: TTL %v is negative", c.TTL)
	case c.MaxValueBytes < 0:
		return fmt.Errorf("metadata server config: MaxValueBytes %d is negative", c.MaxValueBytes)
	}
	return nil
}

// Server serves Mooncake's HTTP metadata protocol from memory, with
// Mooncake-master semantics: GET of a missing key and DELETE of a missing
// key answer 404; a PUT to a key containing "rpc_meta" that already holds
// a different body answers 400 (the same body answers 200). GET /health
// answers 200 "OK". It is an http.Handler; the caller owns the listener.
type Server struct {
	cfg  ServerConfig
	log  *slog.Logger
	logs ratelog.Every
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu struct {
		sync.Mutex
		// entries maps key to value and last write time.
		entries map[string]serverEntry
		// bytes is the charge of every entry (entrySize).
		bytes int64
	}
	// jmu orders changes: a writer holds it from applying a change in
	// memory until its log record is synced, so the log's order is the
	// store's. Taken before mu, never inside it; j is nil without a
	// snapshot path.
	jmu sync.Mutex
	j   *journal
}

// entrySize is what an entry counts against MaxTotalBytes.
func entrySize(key string, value []byte) int64 {
	return int64(len(key)+len(value)) + entryOverheadBytes
}

type serverEntry struct {
	value   []byte
	written time.Time
}

// snapshotFile is the on-disk form.
type snapshotFile struct {
	Format  string            `json:"format"`
	Entries map[string][]byte `json:"entries"`
}

// NewServer returns a server, loaded from cfg.SnapshotPath when that file
// exists. A snapshot that cannot be parsed is an error, never silently
// dropped.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
	s.mu.entries = make(map[string]serverEntry)
	if cfg.SnapshotPath != "" {
		s.j = newJournal(cfg.SnapshotPath)
		entries, err := s.j.load()
		if err != nil {
			return nil, err
		}
		now := time.Now() // a loaded entry gets a full TTL to be re-published
		for k, v := range entries {
			s.mu.entries[k] = serverEntry{value: v, written: now}
			s.mu.bytes += entrySize(k, v)
		}
		if len(entries) > 0 {
			s.log.Info("metadata snapshot loaded", "path", cfg.SnapshotPath, "entries", len(entries))
		}
	}
	if cfg.TTL > 0 {
		s.wg.Add(1)
		go s.runExpire()
	}
	return s, nil
}

// Len returns the number of entries.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.entries)
}

// Close stops the expiry loop and writes a last snapshot. A second Close
// is harmless.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		if s.j == nil {
			return
		}
		s.jmu.Lock()
		defer s.jmu.Unlock()
		if s.j.logBytes > 0 {
			err = s.j.compact(s.snapshotEntries())
		}
		if cerr := s.j.close(); err == nil {
			err = cerr
		}
	})
	return err
}

// ServeHTTP implements the REST protocol.
func (s *Server) ServeHTTP(w nethttp.ResponseWriter, r *nethttp.Request) {
	switch r.URL.Path {
	case "/health":
		if r.Method != nethttp.MethodGet && r.Method != nethttp.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			reply(w, nethttp.StatusMethodNotAllowed, "method not allowed")
			return
		}
		reply(w, nethttp.StatusOK, msgHealthy)
		return
	case s.cfg.Path:
	default:
		reply(w, nethttp.StatusNotFound, "no such path")
		return
	}
	key := r.URL.Query().Get("key")
	switch r.Method {
	case nethttp.MethodGet, nethttp.MethodPut, nethttp.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		reply(w, nethttp.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if key == "" {
		reply(w, nethttp.StatusBadRequest, msgKeyRequired)
		return
	}
	if len(key) > s.cfg.MaxKeyBytes {
		reply(w, nethttp.StatusRequestEntityTooLarge, fmt.Sprintf("key exceeds %d bytes", s.cfg.MaxKeyBytes))
		return
	}
	switch r.Method {
	case nethttp.MethodGet:
		s.mu.Lock()
		e, ok := s.mu.entries[key]
		s.mu.Unlock()
		if !ok {
			reply(w, nethttp.StatusNotFound, msgNotFound)
			return
		}
		w.Header().Set("Content-Type", jsonContentType)
		w.WriteHeader(nethttp.StatusOK)
		_, _ = w.Write(e.value)
	case nethttp.MethodPut:
		s.put(w, r, key)
	case nethttp.MethodDelete:
		s.lockJournal()
		defer s.unlockJournal()
		s.mu.Lock()
		e, ok := s.mu.entries[key]
		if ok {
			delete(s.mu.entries, key)
			s.mu.bytes -= entrySize(key, e.value)
		}
		s.mu.Unlock()
		if !ok {
			reply(w, nethttp.StatusNotFound, msgNotFound)
			return
		}
		s.log.Debug("metadata deleted", "key", key)
		if !s.logOrFail(w, journalDelete, key, nil) {
			return
		}
		reply(w, nethttp.StatusOK, msgDeleted)
	}
}

func (s *Server) put(w nethttp.ResponseWriter, r *nethttp.Request, key string) {
	if r.ContentLength > s.cfg.MaxValueBytes { // refused before a byte of it is read
		reply(w, nethttp.StatusRequestEntityTooLarge, fmt.Sprintf("value exceeds %d bytes", s.cfg.MaxValueBytes))
		return
	}
	body, err := io.ReadAll(nethttp.MaxBytesReader(w, r.Body, s.cfg.MaxValueBytes))
	if err != nil {
		var mbe *nethttp.MaxBytesError
		if errors.As(err, &mbe) {
			reply(w, nethttp.StatusRequestEntityTooLarge, fmt.Sprintf("value exceeds %d bytes", s.cfg.MaxValueBytes))
			return
		}
		reply(w, nethttp.StatusBadRequest, "invalid request")
		return
	}
	now := time.Now()
	s.lockJournal()
	defer s.unlockJournal()
	s.mu.Lock()
	old, exists := s.mu.entries[key]
	if exists && bytes.Equal(old.value, body) {
		old.written = now
		s.mu.entries[key] = old
		s.mu.Unlock()
		msg := msgUpdated
		if strings.Contains(key, rpcMetaSubstring) {
			msg = msgUnchanged
		}
		reply(w, nethttp.StatusOK, msg)
		return
	}
	if exists && strings.Contains(key, rpcMetaSubstring) {
		s.mu.Unlock()
		s.log.Warn("metadata rpc_meta conflict refused", "key", key)
		reply(w, nethttp.StatusBadRequest, msgDuplicateRPC)
		return
	}
	total := s.mu.bytes + entrySize(key, body)
	if exists {
		total -= entrySize(key, old.value)
	}
	if (!exists && len(s.mu.entries) >= s.cfg.MaxEntries) || total > s.cfg.MaxTotalBytes {
		n, b := len(s.mu.entries), s.mu.bytes
		s.mu.Unlock()
		if ok, held := s.logs.Allow("full"); ok {
			s.log.Warn("metadata store full, put refused", "key", key, "entries", n, "bytes", b, "suppressed", held)
		}
		reply(w, nethttp.StatusInsufficientStorage, fmt.Sprintf("metadata store full (%d entries, %d bytes)", n, b))
		return
	}
	s.mu.entries[key] = serverEntry{value: body, written: now}
	s.mu.bytes = total
	s.mu.Unlock()
	s.log.Debug("metadata updated", "key", key, "bytes", len(body))
	if !s.logOrFail(w, journalPut, key, body) {
		return
	}
	reply(w, nethttp.StatusOK, msgUpdated)
}

func reply(w nethttp.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", jsonContentType)
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

// lockJournal and unlockJournal bracket a change when the server keeps a
// journal (see Server.jmu).
func (s *Server) lockJournal() {
	if s.j != nil {
		s.jmu.Lock()
	}
}

func (s *Server) unlockJournal() {
	if s.j != nil {
		s.jmu.Unlock()
	}
}

// logOrFail makes a change durable (the caller holds jmu): it appends it
// to the journal, compacting when the log has grown; on failure it answers
// 500 and reports false, so a change is acknowledged only once durable.
func (s *Server) logOrFail(w nethttp.ResponseWriter, op byte, key string, value []byte) bool {
	if s.j == nil {
		return true
	}
	if err := s.j.append(op, key, value); err != nil {
		s.log.Error("metadata snapshot write failed", "path", s.cfg.SnapshotPath, "err", err)
		reply(w, nethttp.StatusInternalServerError, "snapshot write failed")
		return false
	}
	s.maybeCompact()
	return true
}

// maybeCompact rewrites the snapshot once the log outgrew it (the caller
// holds jmu). A failure is logged: the change itself is already durable.
func (s *Server) maybeCompact() {
	if !s.j.wantsCompaction() {
		return
	}
	if err := s.j.compact(s.snapshotEntries()); err != nil {
		s.log.Error("metadata snapshot compaction failed", "path", s.cfg.SnapshotPath, "err", err)
	}
}

// snapshotEntries copies the entries for a snapshot.
func (s *Server) snapshotEntries() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string][]byte, len(s.mu.entries))
	for k, e := range s.mu.entries {
		m[k] = e.value
	}
	return m
}

func decodeSnapshot(data []byte) (map[string][]byte, error) {
	var snap snapshotFile
	if err := json.Unmarshal(data, &snap); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if snap.Format != snapshotFormat {
		return nil, fmt.Errorf("unknown format %q (want %q)", snap.Format, snapshotFormat)
	}
	for k := range snap.Entries {
		if k == "" {
			return nil, errors.New("empty key")
		}
	}
	return snap.Entries, nil
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory is written and synced, renamed over path, and the directory
// synced, so a crash leaves the old or the new file, never a torn one.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write metadata snapshot: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write metadata snapshot %q: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// runExpire drops entries older than TTL. It is owned by the Server and
// stops when Close closes s.stop.
func (s *Server) runExpire() {
	defer s.wg.Done()
	every := max(s.cfg.TTL/4, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.expire(now)
		}
	}
}

func (s *Server) expire(now time.Time) {
	var gone []string
	s.lockJournal()
	defer s.unlockJournal()
	s.mu.Lock()
	for k, e := range s.mu.entries {
		if now.Sub(e.written) > s.cfg.TTL {
			delete(s.mu.entries, k)
			s.mu.bytes -= entrySize(k, e.value)
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	for _, k := range gone {
		s.log.Info("metadata entry expired", "key", k, "ttl", s.cfg.TTL)
		if s.j == nil {
			continue
		}
		if err := s.j.append(journalDelete, k, nil); err != nil {
			s.log.Error("metadata snapshot write failed", "path", s.cfg.SnapshotPath, "err", err)
			return
		}
	}
	if s.j != nil && len(gone) > 0 {
		s.maybeCompact()
	}
}
