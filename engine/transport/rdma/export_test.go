package rdma

// SetOmitLocalGID makes t's handshakes leave local_gid out, as some peers'
// do, so the other side must find the GID in t's descriptor.
func (t *Transport) SetOmitLocalGID(v bool) { t.omitGID = v }
