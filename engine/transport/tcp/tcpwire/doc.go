// Package tcpwire is the TCP transport's wire codec, byte-compatible with
// Mooncake's classic TCP transport (specs/mooncake.md §4): the 24-byte
// request header and the version 2 status frame. It is pure data with no
// dependencies beyond the standard library, so its fuzz targets run in a
// small binary.
package tcpwire
