// Package nixl is the NIXL backend agent of kvferry: the semantics of the
// KVFERRY backend plugin for NVIDIA's NIXL (specs/nixl.md §3), over one
// transfer engine per agent.
//
// An Agent knows the other agents by name (LoadConnInfo), hands out public
// data per registered buffer for NIXL's metadata exchange (PublicData,
// LoadRemoteMD), runs reusable transfer requests (PrepXfer, Post,
// PostNotify, Check, Release) and delivers notifications tagged with the
// sender agent's name (Notify, Notifications). The engine progresses on its
// own: a post's notification leaves as soon as its data has landed, and
// Check reports success only after that, whether or not NIXL runs a
// progress thread.
//
// The package has a plain Go API and never sees a C type. abi/ implements
// kvferry.h "NIXL support" over it: it parses the C options (ParseOptions),
// creates the engine, converts descriptor arrays (Desc mirrors
// kvferry_nixl_desc_t) and maps this package's errors to nixl_status_t in
// one table. MD and Xfer values are handles the C caller holds directly.
//
// Ownership and lifetime: an Agent owns its engine from New on and closes it
// in Close, which also cancels running transfers. All methods are safe for
// concurrent use; after Close they fail with the engine's errors.
package nixl
