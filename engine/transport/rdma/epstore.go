package rdma

// Endpoint stores (Config.EndpointStore, MC_ENDPOINT_STORE_TYPE).
const (
	// EndpointStoreSIEVE evicts as Mooncake's SIEVEEndpointStore (SIEVE,
	// NSDI '24: a hand walks from the oldest endpoint towards the newest,
	// sparing and clearing endpoints used since it last passed).
	EndpointStoreSIEVE = "SIEVE"
	// EndpointStoreFIFO evicts the oldest endpoint.
	EndpointStoreFIFO = "FIFO"
)

// epEntry is one endpoint of an epStore, in a list newest first.
type epEntry struct {
	key        string
	ep         *endpoint
	visited    bool
	prev, next *epEntry // towards the newest, towards the oldest
}

// epStore holds a NIC's endpoints by peer NIC path, at most max of them,
// and chooses which to evict to make room (Mooncake's EndpointStore: SIEVE
// by default, FIFO on request). Its caller serializes access (nic.mu).
type epStore struct {
	sieve      bool
	max        int
	m          map[string]*epEntry
	head, tail *epEntry // newest, oldest
	hand       *epEntry // SIEVE: where the next eviction starts (nil: the oldest)
	evictions  uint64
}

func newEPStore(kind string, max int) *epStore {
	return &epStore{sieve: kind != EndpointStoreFIFO, max: max, m: map[string]*epEntry{}}
}

func (s *epStore) len() int { return len(s.m) }

// get returns the endpoint toward key and marks it used (nil when none).
func (s *epStore) get(key string) *endpoint {
	e := s.m[key]
	if e == nil {
		return nil
	}
	e.visited = true
	return e.ep
}

// peek returns the endpoint toward key without marking it used.
func (s *epStore) peek(key string) *endpoint {
	if e := s.m[key]; e != nil {
		return e.ep
	}
	return nil
}

// put adds ep toward key (which must be absent), first evicting endpoints
// while the store is full; it returns the evicted ones for the caller to
// retire. As in Mooncake, a new endpoint starts out visited.
func (s *epStore) put(key string, ep *endpoint) (evicted []*endpoint) {
	for len(s.m) >= s.max && len(s.m) > 0 {
		evicted = append(evicted, s.evict())
	}
	e := &epEntry{key: key, ep: ep, visited: true, next: s.head}
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
	s.m[key] = e
	return evicted
}

// del removes the endpoint toward key when it is ep.
func (s *epStore) del(key string, ep *endpoint) {
	e := s.m[key]
	if e == nil || e.ep != ep {
		return
	}
	if s.hand == e {
		s.hand = e.prev // nil when e was the newest: start again at the oldest
	}
	s.unlink(e)
}

func (s *epStore) unlink(e *epEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	delete(s.m, e.key)
}

// evict removes and returns the victim: FIFO the oldest; SIEVE the first
// endpoint not used since the hand last passed it, walking from the hand
// towards the newest and wrapping to the oldest, clearing the marks it
// passes.
func (s *epStore) evict() *endpoint {
	s.evictions++
	if !s.sieve {
		v := s.tail
		s.unlink(v)
		return v.ep
	}
	o := s.hand
	if o == nil {
		o = s.tail
	}
	for o.visited {
		o.visited = false
		if o.prev != nil {
			o = o.prev
		} else {
			o = s.tail
		}
	}
	s.hand = o.prev
	s.unlink(o)
	return o.ep
}

// each calls f for every endpoint, newest first.
func (s *epStore) each(f func(*endpoint)) {
	for e := s.head; e != nil; e = e.next {
		f(e.ep)
	}
}
