package tlsconf

import "github.com/kvferry/kvferry/internal/hostenv"

// FilesFromEnv returns the control plane's TLS files named in env
// (KVFERRY_TLS_CERT_FILE, KVFERRY_TLS_KEY_FILE, KVFERRY_TLS_CA_FILE;
// hostenv.Lookup in the library, the C getenv).
func FilesFromEnv(env hostenv.Env) Files {
	var f Files
	f.Cert, _ = env.Str("KVFERRY_TLS_CERT_FILE")
	f.Key, _ = env.Str("KVFERRY_TLS_KEY_FILE")
	f.CA, _ = env.Str("KVFERRY_TLS_CA_FILE")
	return f
}
