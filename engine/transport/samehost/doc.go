// Package samehost holds the transports between engines in different
// processes of one host: cma (process_vm_readv/writev, one copy by the
// kernel) and shm (staging chunks of shared memory, two C memcpy). The
// engine's selector prefers local (same process) over cma over shm over
// TCP; a peer is "same host" only when its descriptor's host identity
// (kvferry_host: boot id, pid and user namespaces) matches ours, never from
// its IP address, and it publishes the transport in kvferry_extra. A
// Mooncake peer publishes neither and keeps getting TCP.
//
// # Owner side
//
// Every engine with cma or shm installed runs a node: a SOCK_SEQPACKET Unix
// socket in the abstract namespace ("@kvferry-<pid>-<random>", published in
// kvferry_extra["cma"] and ["shm"]) and a control page (a sealed memfd)
// that mirrors the engine's registered regions. Initiators open one session
// per owner and transport; the kernel tells the owner who connected
// (SO_PEERCRED) and the initiator who listens, which must be the pid of the
// descriptor.
//
// # cma
//
// The session passes the control page (read-only to the initiator) and a
// page of epoch slots: one per initiator worker, then one per inline
// copier (the owner treats them all alike). The initiator first reads
// the owner's random nonce with process_vm_readv: this proves that the
// kernel allows the access and that the pid is the owner. When the kernel
// refuses (EPERM: a different user without CAP_SYS_PTRACE, yama
// ptrace_scope, a non-dumpable peer, seccomp; ENOSYS), the refusal is
// logged once with its reason and cma no longer reaches that peer, so the
// selector moves on to shm.
//
// For every batch a worker stores the current epoch in its slot, re-reads
// the epoch (retrying if it moved), validates every range against the
// mirror under a seqlock (a table its owner is writing is read again until
// the update ends, bounded by the transfer timeout and the owner's life:
// the owner's thread may be descheduled inside an update), copies with process_vm_readv/writev (up to 1024
// ranges per call, resuming partial transfers), and clears its slot. A
// small batch (Config.CMAInlineBytes, at most 1024 slices) skips the hand-off
// to a worker: the submitting goroutine takes a free inline copier, whose
// slot it uses exactly as a worker uses its own, and copies in Submit;
// with every inline copier busy the batch goes to the workers. Of a larger
// batch of several slices the workers get most, and the submitting
// goroutine copies the last 1/(Workers+1) of the slices (at most
// CMAInlineBytes, at least one slice) with an inline copier. When a
// region is unregistered, the engine republishes its descriptor; the node
// then rewrites the mirror, bumps the epoch and waits until no slot holds
// an older epoch before UnregisterMemory returns. Hence:
//
//   - a request outside the owner's registered memory is refused before
//     any byte moves;
//   - once UnregisterMemory has returned on the owner, no cma initiator
//     writes or reads that memory any more, and none starts to;
//   - the wait is bounded by the transfer timeout: an initiator stopped
//     (SIGSTOP, debugger) inside a copy for longer than that is logged as
//     an error, and the memory may then be written after the call returns;
//   - the check runs in the initiator. It protects an owner from stale or
//     buggy kvferry peers, not from a hostile process: a process that may
//     use process_vm_writev on the owner may also ptrace it.
//
// The owner's death is seen by the session's socket (EOF), by a pidfd when
// the kernel has them, and by ESRCH; requests then fail, never hang.
//
// # shm
//
// The session passes a staging memfd of ShmChunks chunks of ShmChunkBytes,
// sealed against shrinking so that no side can make the other fault. A
// worker packs pieces of its slices into chunks (up to 256 per chunk),
// copies written data in, and sends one request per chunk; the owner
// checks and pins every piece against its engine's registry (exactly as
// the TCP server does, so the owner-side guarantee is the same as TCP's:
// nothing outside registered memory, nothing after UnregisterMemory
// returned), copies with one C call per chunk and answers with a status
// per piece; the worker copies read data out. The socket is open to any
// local process that can reach the abstract namespace, as the TCP data
// port is open to the network.
//
// # Environments
//
// Same user, or root (CAP_SYS_PTRACE): cma. Different users, yama
// ptrace_scope >= 1 between siblings (unless the owner opts into
// KVFERRY_CMA_ALLOW_PTRACER), a seccomp or LSM policy that denies
// process_vm_* in the initiator: shm. Processes
// in different pid or user namespaces (containers) do not share a host
// identity and use TCP; so do processes that share pid and user
// namespaces but not the network namespace (the abstract socket is per
// network namespace).
package samehost
