// Package certs reads the certificates and CA bundles a server serves TLS
// with from their files, and reads them again without a restart: on
// Reload (cmd/sprout calls it on SIGHUP) and when the files change
// (Watch). New handshakes use what was read last; connections already
// open are untouched, as TLS has them keep the keys they agreed on.
//
// # Files
//
// A KeyPair is a certificate chain and its private key (PEM), a CAs a
// bundle of CA certificates (PEM); each is named by the flags that gave
// it, and its errors say so. Loading at start fails with that name
// (cmd/sprout exits 5 with it). Later, a file that does not load (cut
// short, the wrong key, not PEM, gone) keeps the previous certificate in
// service: the failure is logged once, counted, and marked stale until a
// good file replaces it; it never stops the server.
//
// # Watching
//
// Watch polls: every interval it takes each file's identity (device,
// inode, size and modification time, through symlinks) and reloads an
// entry whose files changed and then stayed the same for one more
// interval, so that a file caught half written, or a certificate replaced
// before its key, is read once whole rather than failing first. Polling
// was chosen over inotify (fsnotify) because it needs nothing from the
// kernel or the filesystem and sees every way a file is replaced:
// Kubernetes swapping a secret volume's ..data symlink to a new directory
// (the files' paths never change; the inodes behind them do), certbot
// re-pointing a symlink, an editor renaming over the file, a bind mount,
// NFS; inotify sees the first only if the watch is on the directory and
// sees none on some network filesystems. Its cost is a stat of each file
// per interval; its delay, an interval or two, is nothing beside the time
// the kubelet takes to update a secret (up to a minute or more).
//
// # Serving
//
// KeyPair.GetCertificate and GetClientCertificate, and CAs.Pool, read the
// current value with one atomic load, at each handshake. ServerConfig
// builds a server's tls.Config from a KeyPair and, for mutual TLS, a CAs:
// Go's defaults, TLS 1.2 at least, and the client CAs of the moment
// through GetConfigForClient.
//
// # Figures
//
// Stats reports the reloads that worked and failed, and for each entry
// its leaf certificate's (a bundle's earliest) expiry and whether it is
// stale, for internal/ops' metrics.
package certs
