// Package ssd is a store client's disk tier (Mooncake's LOCAL_DISK
// replicas, `enable_ssd_offload`): one checksummed file per object in a
// directory, written with large aligned writes (O_DIRECT where the
// filesystem allows it), read back with the checksum verified. Files that
// survive a client restart intact are found again by Open; a torn or
// corrupt file is deleted, never served.
//
// File layout: a 4 KiB header (magic, CRC-32C of the rest of the header,
// format version, the object's uid and size, the CRC-32C of its data, its
// tenant and key), then the data, padded with zeros to a multiple of
// 4 KiB. A file is written under a temporary name and renamed into place,
// so a reader never sees one half written; the checksums catch what a
// crash of the machine could still leave behind.
package ssd

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/wire"
)

// Layout constants.
const (
	// Align is the alignment of offsets, lengths and buffers (O_DIRECT).
	Align      = 4096
	headerLen  = Align
	magic      = "KVFDISK1"
	version    = 1
	fileSuffix = ".kvd"
	tmpSuffix  = ".tmp"
	idFile     = "DISK_ID"
	// chunk is the size of one write or read, and of each pooled buffer:
	// large aligned I/O, small enough that a copy is still in the cache
	// when its checksum is taken.
	chunk = 1 << 20
	// maxName bounds tenant plus key in a header.
	maxName = headerLen - 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileBytes is the length of the file of an object of size bytes.
func FileBytes(size uint64) uint64 { return headerLen + alignUp(size) }

func alignUp(n uint64) uint64 { return (n + Align - 1) &^ (Align - 1) }

// Entry is an object the tier holds.
type Entry struct {
	Tenant    string
	Key       string
	UID       uint64
	Size      uint64
	FileBytes uint64
}

type fileKey struct{ tenant, key string }

// Store is a disk tier. Safe for concurrent use; writes and reads of
// different objects run in parallel.
type Store struct {
	dir      string
	id       string
	capacity uint64
	direct   bool // O_DIRECT works here
	log      *slog.Logger

	mu    sync.Mutex
	index map[fileKey]Entry
	used  uint64

	bufs sync.Pool // *cmem.Map of chunk bytes, page aligned

	writeHook atomic.Pointer[func(bytes uint64)] // SetWriteHook
	readHook  atomic.Pointer[func(key string)]   // SetReadHook
}

// SetWriteHook makes every file write call f with the file's length first,
// on the writing goroutine (nil: none). Tests use it to slow the writers
// down (a throttled directory); f must return.
func (s *Store) SetWriteHook(f func(bytes uint64)) {
	if f == nil {
		s.writeHook.Store(nil)
		return
	}
	s.writeHook.Store(&f)
}

// SetReadHook makes every file read call f with the object's key first,
// on the reading goroutine (nil: none). Tests use it to hold a read up (a
// stalled disk, or a holder that dies in the middle of a read); f must
// return.
func (s *Store) SetReadHook(f func(key string)) {
	if f == nil {
		s.readHook.Store(nil)
		return
	}
	s.readHook.Store(&f)
}

// Config configures a Store.
type Config struct {
	// Dir is the directory (created if missing).
	Dir string
	// Capacity bounds the bytes the files may take; 0 means 90% of the
	// filesystem's free space at Open (plus what the tier holds already).
	Capacity uint64
	// Logger receives what Open dropped; nil discards.
	Logger *slog.Logger
}

// Open opens the tier in cfg.Dir: it reads its id (creating one the first
// time), deletes temporary files, and indexes every file whose header is
// intact and whose length matches it (the rest are deleted). Data
// checksums are verified on each read.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("ssd: empty directory")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("ssd: %w", err)
	}
	s := &Store{dir: cfg.Dir, capacity: cfg.Capacity, log: log, index: make(map[fileKey]Entry)}
	s.bufs.New = func() any {
		m, err := cmem.MapAnon(chunk)
		if err != nil {
			return nil
		}
		return m
	}
	id, err := readOrCreateID(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s.id = id
	s.direct = probeDirect(cfg.Dir)
	if err := s.scan(); err != nil {
		return nil, err
	}
	if s.capacity == 0 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(cfg.Dir, &st); err != nil {
			return nil, fmt.Errorf("ssd: statfs %s: %w", cfg.Dir, err)
		}
		s.capacity = uint64(float64(st.Bavail)*float64(st.Bsize)*0.9) + s.used
	}
	log.Info("disk tier opened", "dir", cfg.Dir, "id", s.id, "objects", len(s.index), "bytes", s.used,
		"capacity", s.capacity, "o_direct", s.direct)
	return s, nil
}

func readOrCreateID(dir string) (string, error) {
	p := filepath.Join(dir, idFile)
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var b [16]byte
	if _, err := cryptoRand(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	tmp := p + tmpSuffix
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("ssd: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("ssd: %w", err)
	}
	return id, nil
}

// probeDirect reports whether O_DIRECT files can be written in dir (tmpfs
// refuses them).
func probeDirect(dir string) bool {
	p := filepath.Join(dir, ".probe"+tmpSuffix)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_DIRECT, 0o644)
	if err != nil {
		return false
	}
	defer os.Remove(p)
	defer f.Close()
	m, err := cmem.MapAnon(Align)
	if err != nil {
		return false
	}
	defer m.Close()
	_, err = f.Write(m.Bytes())
	return err == nil
}

// ID returns the tier's id, kept in its directory across restarts.
func (s *Store) ID() string { return s.id }

// Dir returns the directory.
func (s *Store) Dir() string { return s.dir }

// Capacity returns the bytes the files may take.
func (s *Store) Capacity() uint64 { return s.capacity }

// Direct reports whether files are written and read with O_DIRECT.
func (s *Store) Direct() bool { return s.direct }

// Used returns the bytes the files take.
func (s *Store) Used() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Entries returns the objects the tier holds.
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.index))
	for _, e := range s.index {
		out = append(out, e)
	}
	return out
}

func (s *Store) path(tenant, key string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + key))
	return filepath.Join(s.dir, hex.EncodeToString(h[:16])+fileSuffix)
}

// header is a file's decoded header.
type header struct {
	uid, size   uint64
	dataCRC     uint32
	tenant, key string
}

func (h header) encode(b []byte) {
	clear(b[:headerLen])
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[12:], version)
	binary.LittleEndian.PutUint64(b[16:], h.uid)
	binary.LittleEndian.PutUint64(b[24:], h.size)
	binary.LittleEndian.PutUint32(b[32:], h.dataCRC)
	binary.LittleEndian.PutUint16(b[36:], uint16(len(h.tenant)))
	binary.LittleEndian.PutUint16(b[38:], uint16(len(h.key)))
	n := copy(b[40:], h.tenant)
	copy(b[40+n:], h.key)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[12:headerLen], castagnoli))
}

var errTorn = errors.New("ssd: torn or corrupt file")

func decodeHeader(b []byte) (header, error) {
	if len(b) < headerLen || string(b[:8]) != magic ||
		binary.LittleEndian.Uint32(b[8:]) != crc32.Checksum(b[12:headerLen], castagnoli) ||
		binary.LittleEndian.Uint32(b[12:]) != version {
		return header{}, errTorn
	}
	h := header{uid: binary.LittleEndian.Uint64(b[16:]), size: binary.LittleEndian.Uint64(b[24:]),
		dataCRC: binary.LittleEndian.Uint32(b[32:])}
	tl, kl := int(binary.LittleEndian.Uint16(b[36:])), int(binary.LittleEndian.Uint16(b[38:]))
	if 40+tl+kl > headerLen {
		return header{}, errTorn
	}
	h.tenant, h.key = string(b[40:40+tl]), string(b[40+tl:40+tl+kl])
	return h, nil
}

// scan indexes the directory (Open).
func (s *Store) scan() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("ssd: %w", err)
	}
	buf := make([]byte, headerLen)
	dropped := 0
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(s.dir, name)
		if strings.HasSuffix(name, tmpSuffix) {
			_ = os.Remove(p)
			continue
		}
		if !strings.HasSuffix(name, fileSuffix) {
			continue
		}
		h, n, err := readHeader(p, buf)
		if err == nil && (uint64(n) != FileBytes(h.size) || s.path(h.tenant, h.key) != p) {
			err = errTorn
		}
		if err != nil {
			dropped++
			_ = os.Remove(p)
			continue
		}
		s.index[fileKey{h.tenant, h.key}] = Entry{Tenant: h.tenant, Key: h.key, UID: h.uid, Size: h.size, FileBytes: uint64(n)}
		s.used += uint64(n)
	}
	if dropped > 0 {
		s.log.Warn("disk tier: torn or corrupt files deleted", "dir", s.dir, "files", dropped)
	}
	return nil
}

func readHeader(p string, buf []byte) (header, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return header{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return header{}, 0, err
	}
	if _, err := f.ReadAt(buf[:headerLen], 0); err != nil {
		return header{}, 0, errTorn
	}
	h, err := decodeHeader(buf)
	return h, st.Size(), err
}

func (s *Store) buf() (*cmem.Map, error) {
	m, _ := s.bufs.Get().(*cmem.Map)
	if m == nil {
		return nil, fmt.Errorf("ssd: no memory for an I/O buffer: %w", wire.ErrInternal)
	}
	return m, nil
}

func (s *Store) openFlags() int {
	if s.direct {
		return syscall.O_DIRECT
	}
	return 0
}

// Write stores data as the object (tenant, key) at version uid, replacing
// any file of the key, and returns the file's length. It fails with
// NO_AVAILABLE_HANDLE when the tier is full.
func (s *Store) Write(tenant, key string, uid uint64, data []byte) (uint64, error) {
	if len(tenant)+len(key) > maxName || uid == 0 || len(data) == 0 {
		return 0, fmt.Errorf("ssd: write %q: %w", key, wire.ErrInvalidParams)
	}
	size := uint64(len(data))
	fb := FileBytes(size)
	k := fileKey{tenant, key}
	s.mu.Lock()
	old, had := s.index[k]
	room := s.capacity - min(s.used, s.capacity)
	if had {
		room += old.FileBytes
	}
	if fb > room {
		s.mu.Unlock()
		return 0, fmt.Errorf("ssd: write %q (%d bytes): tier full (%d of %d used): %w", key, fb, s.used, s.capacity, wire.ErrNoAvailableHandle)
	}
	s.used += fb // reserved
	s.mu.Unlock()
	if f := s.writeHook.Load(); f != nil {
		(*f)(fb)
	}
	err := s.writeFile(tenant, key, uid, data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.used -= fb
		return 0, err
	}
	if cur, ok := s.index[k]; ok {
		s.used -= cur.FileBytes
	}
	s.index[k] = Entry{Tenant: tenant, Key: key, UID: uid, Size: size, FileBytes: fb}
	return fb, nil
}

func (s *Store) writeFile(tenant, key string, uid uint64, data []byte) error {
	final := s.path(tenant, key)
	tmp := fmt.Sprintf("%s.%d%s", final, uid, tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|s.openFlags(), 0o644)
	if err != nil {
		return fmt.Errorf("ssd: %w: %w", err, wire.ErrWriteFail)
	}
	ok := false
	defer func() {
		f.Close()
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	m, err := s.buf()
	if err != nil {
		return err
	}
	defer s.bufs.Put(m)
	b := m.Bytes()
	// The data goes first, after the header's block, in whole 4 KiB blocks
	// from the aligned buffer; the checksum is taken from each copy while
	// it is still in the cache (one pass over the source); the header,
	// which holds the checksum, is written last.
	crc := uint32(0)
	pos := int64(headerLen)
	for off := 0; off < len(data); {
		n := copy(b, data[off:])
		crc = crc32.Update(crc, castagnoli, b[:n])
		off += n
		w := int(alignUp(uint64(n)))
		clear(b[n:w])
		if _, err := f.WriteAt(b[:w], pos); err != nil {
			return fmt.Errorf("ssd: write %s: %w: %w", tmp, err, wire.ErrWriteFail)
		}
		pos += int64(w)
	}
	h := header{uid: uid, size: uint64(len(data)), dataCRC: crc, tenant: tenant, key: key}
	h.encode(b)
	if _, err := f.WriteAt(b[:headerLen], 0); err != nil {
		return fmt.Errorf("ssd: write %s: %w: %w", tmp, err, wire.ErrWriteFail)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ssd: close %s: %w: %w", tmp, err, wire.ErrWriteFail)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("ssd: %w: %w", err, wire.ErrWriteFail)
	}
	ok = true
	return nil
}

// Read reads the object (tenant, key) at version uid into dst (its size),
// verifying the header and the data's checksum. A file that fails the
// check is deleted: CHECKSUM_MISMATCH. A missing file or another version
// is OBJECT_NOT_FOUND.
func (s *Store) Read(tenant, key string, uid uint64, dst []byte) error {
	s.mu.Lock()
	e, ok := s.index[fileKey{tenant, key}]
	s.mu.Unlock()
	if !ok || e.UID != uid || e.Size != uint64(len(dst)) {
		return fmt.Errorf("ssd: read %q version %d: %w", key, uid, wire.ErrObjectNotFound)
	}
	if f := s.readHook.Load(); f != nil {
		(*f)(key)
	}
	err := s.readFile(tenant, key, uid, dst)
	if errors.Is(err, errTorn) {
		s.log.Warn("disk tier: corrupt file deleted", "key", key, "tenant", tenant, "err", err)
		s.Delete(tenant, key, uid)
		return fmt.Errorf("ssd: read %q: %w: %w", key, err, wire.ErrChecksumMismatch)
	}
	return err
}

func (s *Store) readFile(tenant, key string, uid uint64, dst []byte) error {
	p := s.path(tenant, key)
	f, err := os.OpenFile(p, os.O_RDONLY|s.openFlags(), 0)
	if err != nil {
		return fmt.Errorf("ssd: %w: %w", err, wire.ErrObjectNotFound)
	}
	defer f.Close()
	m, err := s.buf()
	if err != nil {
		return err
	}
	defer s.bufs.Put(m)
	b := m.Bytes()
	total := FileBytes(uint64(len(dst)))
	var h header
	crc := uint32(0)
	out := 0
	for pos := uint64(0); pos < total; {
		n := min(uint64(len(b)), total-pos)
		got, err := f.ReadAt(b[:n], int64(pos))
		if uint64(got) != n {
			return fmt.Errorf("%w: short read at %d: %v", errTorn, pos, err)
		}
		part := b[:n]
		if pos == 0 {
			if h, err = decodeHeader(part); err != nil {
				return err
			}
			if h.tenant != tenant || h.key != key {
				return fmt.Errorf("%w: header names another object", errTorn)
			}
			if h.uid != uid || h.size != uint64(len(dst)) {
				// Another version of the key replaced the file since the
				// index was read (a concurrent Write renamed it into
				// place): not this version, but no corruption either.
				return fmt.Errorf("ssd: read %q version %d: the file holds version %d: %w", key, uid, h.uid, wire.ErrObjectNotFound)
			}
			part = part[headerLen:]
		}
		k := copy(dst[out:], part)
		crc = crc32.Update(crc, castagnoli, dst[out:out+k])
		out += k
		pos += n
	}
	if crc != h.dataCRC {
		return fmt.Errorf("%w: data checksum mismatch", errTorn)
	}
	return nil
}

// Delete removes the file of (tenant, key) when it holds version uid (0:
// any version).
func (s *Store) Delete(tenant, key string, uid uint64) {
	k := fileKey{tenant, key}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.index[k]
	if !ok || uid != 0 && e.UID != uid {
		return
	}
	delete(s.index, k)
	s.used -= e.FileBytes
	_ = os.Remove(s.path(tenant, key))
}

func cryptoRand(b []byte) (int, error) { return rand.Read(b) }
