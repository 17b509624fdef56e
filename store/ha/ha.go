// Package ha is the store's high availability over etcd: masters elect a
// leader, which publishes its RPC address at Mooncake's key
// "mooncake-store/<cluster_id>/master_view" under a lease (specs/mooncake.md
// §7.6), and clients find the leader there. Both store/master and
// store/client use it; it imports neither.
package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/kvferry/kvferry/internal/etcddial"
	"github.com/kvferry/kvferry/store/ha/haaddr"
)

// Spec values.
const (
	// DefaultClusterID is Mooncake's default --cluster_id.
	DefaultClusterID = haaddr.DefaultClusterID
	// DefaultLeaseTTL is the TTL of the lease under which the leader's
	// address is published (Mooncake's 5 s).
	DefaultLeaseTTL = 5 * time.Second
	// Scheme prefixes an etcd master address on the client side:
	// "etcd://host1:2379;host2:2379".
	Scheme = haaddr.Scheme
)

// ErrNoLeader means no master currently holds the leadership.
var ErrNoLeader = errors.New("no store master leader")

// MasterViewKey returns the etcd key where the leader of clusterID publishes
// its address (haaddr.MasterViewKey).
func MasterViewKey(clusterID string) string { return haaddr.MasterViewKey(clusterID) }

// ParseEndpoints splits an etcd endpoint list as Mooncake writes it
// ("etcd://h1:2379;h2:2379", "h1:2379,h2:2379") into client endpoints
// (haaddr.ParseEndpoints).
func ParseEndpoints(s string) ([]string, error) { return haaddr.ParseEndpoints(s) }

// Dial connects to etcd. The returned client must be closed.
func Dial(endpoints []string, timeout time.Duration) (*clientv3.Client, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: timeout,
		Logger:      nopZapLogger(),
		// Reconnect within about two seconds of etcd coming back: a
		// master's campaign and a client's leader lookups wait for it.
		DialOptions: etcddial.Options(timeout),
	})
	if err != nil {
		return nil, fmt.Errorf("dial etcd %v: %w", endpoints, err)
	}
	return cli, nil
}

// View is the published leader.
type View struct {
	// Address is the leader's RPC address, "host:port".
	Address string
	// Version is the etcd revision at which this leader took over; it grows
	// with every new leader.
	Version uint64
}

// Leader reads the current leader of clusterID. ErrNoLeader if none.
func Leader(ctx context.Context, cli *clientv3.Client, clusterID string) (View, error) {
	key := MasterViewKey(clusterID)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return View{}, fmt.Errorf("read master view %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return View{}, fmt.Errorf("read master view %q: %w", key, ErrNoLeader)
	}
	kv := resp.Kvs[0]
	return View{Address: string(kv.Value), Version: uint64(kv.CreateRevision)}, nil
}

// Campaign competes for the leadership of clusterID until ctx is done,
// publishing address as the leader's. Each time it wins it calls lead with a
// context that is cancelled when the leadership is lost (lease lost, key
// deleted) or ctx is done; lead must return then. On return Campaign gives
// the leadership up (the key is deleted) so a standby takes over at once.
func Campaign(ctx context.Context, cli *clientv3.Client, clusterID, address string, ttl time.Duration,
	log *slog.Logger, lead func(ctx context.Context, view View)) error {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key := MasterViewKey(clusterID)
	ttlSec := max(int(ttl/time.Second), 1)
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttlSec), concurrency.WithContext(ctx))
		if err != nil {
			log.Warn("ha session failed", "key", key, "err", err)
			if !sleepCtx(ctx, time.Second) {
				break
			}
			continue
		}
		campaignOnce(ctx, cli, sess, key, address, log, lead)
		// Revoking the lease deletes the key if we held it.
		closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = cli.Revoke(closeCtx, sess.Lease())
		cancel()
		sess.Orphan()
	}
	return ctx.Err()
}

// campaignOnce runs one session: it waits to win, leads, and returns when
// the session ends, the leadership is lost, or ctx is done.
func campaignOnce(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session, key, address string,
	log *slog.Logger, lead func(ctx context.Context, view View)) {
	for ctx.Err() == nil {
		select {
		case <-sess.Done():
			log.Warn("ha session lost", "key", key)
			return
		default:
		}
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, address, clientv3.WithLease(sess.Lease()))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			log.Warn("ha campaign failed", "key", key, "err", err)
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return
			}
			continue
		}
		if resp.Succeeded {
			view := View{Address: address, Version: uint64(resp.Header.Revision)}
			log.Info("elected store master leader", "key", key, "addr", address, "version", view.Version)
			leadCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { // owned by this call; stops on leadership loss or ctx
				defer close(done)
				watchLoss(leadCtx, cli, sess, key, view.Version)
				cancel()
			}()
			lead(leadCtx, view)
			cancel()
			<-done
			log.Warn("store master leadership ended", "key", key, "addr", address)
			return
		}
		// Someone else leads: wait until the key goes away.
		rev := resp.Header.Revision
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			log.Info("store master standby", "key", key, "leader", string(kvs[0].Value))
		}
		waitDeleted(ctx, cli, sess, key, rev+1)
	}
}

// watchLoss returns when the key we created at version is deleted or
// replaced, the session ends, or ctx is done.
func watchLoss(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session, key string, version uint64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(int64(version)+1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// The watch broke: check directly whether we still lead.
				if !stillLeader(ctx, cli, key, version) {
					return
				}
				wch = cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(int64(version)+1))
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete || uint64(ev.Kv.CreateRevision) != version {
					return
				}
			}
		}
	}
}

func stillLeader(ctx context.Context, cli *clientv3.Client, key string, version uint64) bool {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, key)
	return err == nil && len(resp.Kvs) == 1 && uint64(resp.Kvs[0].CreateRevision) == version
}

// waitDeleted returns when key is deleted (watching from rev), the session
// ends, or ctx is done. A broken watch returns too, so the caller re-checks.
func waitDeleted(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session, key string, rev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(rev))
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return
				}
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// nopZapLogger silences the etcd client, which logs through zap; the library
// prints nothing on its own (DESIGN §8).
func nopZapLogger() *zap.Logger { return zap.NewNop() }
