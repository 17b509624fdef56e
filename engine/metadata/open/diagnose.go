package open

import (
	"log/slog"
	"strings"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
)

// Advertised describes what an engine tells its peers about itself.
type Advertised struct {
	// Segment is the segment name.
	Segment string
	// Host is the IP or host name in rpc_meta (and the data host).
	Host string
	// RPCPort is the RPC (handshake) port.
	RPCPort int
}

// Warning returns why peers on other machines will likely fail to reach
// an engine that advertises adv through the metadata service conn, or ""
// when nothing looks wrong: a loopback, link-local or unspecified address
// published to a service that is not on this machine (the address is only
// reachable from here). A frequent cause of hangs reported by Mooncake
// users (specs/mooncake.md §9.8).
func Warning(conn Conn, adv Advertised) string {
	if conn.Kind == KindP2P || !conn.Remote() {
		return ""
	}
	if metadata.IsLoopbackOrLinkLocal(adv.Host) {
		return "the advertised address " + adv.Host + " is loopback or link-local but the metadata service (" +
			strings.Join(conn.Hosts(), ",") + ") is remote: peers on other machines cannot reach this engine; " +
			"set MC_TCP_BIND_ADDRESS (or the local server name) to a routable address"
	}
	return ""
}

// LogStart logs, once at engine start, the address the engine advertises
// and which metadata service it uses, and warns as Warning does. A conn
// that does not parse is logged as it is.
func LogStart(log *slog.Logger, conn string, adv Advertised) {
	if log == nil {
		return
	}
	c, err := Parse(conn)
	if err != nil {
		log.Info("engine advertises", "segment", adv.Segment, "host", adv.Host, "rpc_port", adv.RPCPort, "metadata", connstr.Redact(conn))
		return
	}
	log.Info("engine advertises", "segment", adv.Segment, "host", adv.Host, "rpc_port", adv.RPCPort,
		"metadata", c.String(), "metadata_kind", string(c.Kind))
	if w := Warning(c, adv); w != "" {
		log.Warn("engine address unreachable from other machines", "segment", adv.Segment, "host", adv.Host,
			"metadata", c.String(), "reason", w)
	}
}
