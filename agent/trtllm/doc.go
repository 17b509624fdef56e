// Package trtllm is the TensorRT-LLM transfer agent of kvferry: the
// semantics of TensorRT-LLM's BaseTransferAgent and TransferStatus
// (specs/tensorrt-llm.md §1, §3, §4) over one transfer engine per agent.
//
// An Agent counts memory registrations (Register, Deregister), knows the
// other agents by name (Load, Invalidate, CheckRemote), sends and receives
// binary messages tagged with the sender agent's name (Notify,
// Notifications) and runs transfers (Submit, SubmitNotify, Wait, Poll,
// Cancel, Free) whose ids are engine batch ids. On the wire a message is
// base64 text sent through the engine's notify RPC, as the stock Mooncake
// agent sends it, so both agents interoperate.
//
// Where the stock Mooncake agent falls short (specs/tensorrt-llm.md §3, §6),
// this one does not: registrations are counted from one and really
// dropped, messages to an agent not loaded yet wait for its load instead of
// vanishing, transfers report failure and can be canceled, there is no
// descriptor cap, and no metadata handshake runs after a transfer.
//
// The package has a plain Go API and never sees a C type. abi/ implements
// kvferry.h "TensorRT-LLM support" over it: it parses the C options
// (ParseOptions), creates the engine, converts descriptor arrays (Desc
// mirrors kvferry_trtllm_desc_t) and maps this package's errors to
// KVFERRY_ERR_* codes in one table.
//
// Ownership and lifetime: an Agent owns its engine from New on and closes it
// in Close; transfers still running then end FAILED. All methods are safe
// for concurrent use.
package trtllm
