/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Resetting a socket core's connection to one peer on one rail.
 *
 * A tcp core holds a chunk on a dead link until the kernel gives up its
 * connection: with the default net.ipv4.tcp_retries2, many minutes.  The
 * op cannot complete earlier (the core may still read its buffer), and
 * the bytes in the socket may still land when the link returns, over
 * what later writes put there.  No public libfabric call closes one
 * peer's connection (fi_av_remove leaves rxm's and tcp's open), so the
 * health watch resets it here, from under the core: every TCP socket of
 * this process between the rail's address and the peer's on that rail is
 * disconnected (connect(AF_UNSPEC): the kernel sends a reset and drops
 * the socket's queues at once).  The core then sees the connection fail,
 * fails what it held there and connects again for the next op.  Nothing
 * of the old connection can land later: its queue is gone, and if the
 * link returns, the peer's kernel answers what is left of it with a
 * reset, since the peer's socket no longer matches ours.
 *
 * A socket is the rail's when its local address is the rail endpoint's
 * (accepted: the listening port; connected out: the rail's IP), and its
 * remote one the peer's rail address (connected out: the listening port;
 * accepted: the peer's IP).  Another peer behind the same IP may share an
 * accepted socket's pattern; only a socket the kernel itself finds
 * stalled (unacknowledged data and no ACK, or nothing received, for the
 * deadline) is reset, and a socket that stalled is dead for whoever owns
 * it.
 */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <linux/tcp.h>		/* tcp_info with tcpi_snd_wnd */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mrl.h"

union mrl_sockaddr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
	struct sockaddr_storage ss;
};

static bool mrl_reset_format(uint32_t fmt)
{
	return fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6 ||
	       fmt == FI_SOCKADDR;
}

static bool mrl_sa_wild(const union mrl_sockaddr *a)
{
	static const struct in6_addr any6 = IN6ADDR_ANY_INIT;

	if (a->sa.sa_family == AF_INET)
		return a->in.sin_addr.s_addr == htonl(INADDR_ANY);
	return !memcmp(&a->in6.sin6_addr, &any6, sizeof(any6));
}

static bool mrl_sa_same_ip(const union mrl_sockaddr *a,
			   const union mrl_sockaddr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return false;
	if (a->sa.sa_family == AF_INET)
		return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
	return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr,
		       sizeof(a->in6.sin6_addr));
}

static uint16_t mrl_sa_port(const union mrl_sockaddr *a)
{
	return a->sa.sa_family == AF_INET ? a->in.sin_port :
	       a->in6.sin6_port;
}

/* Is fd a TCP connection between the rail's address and the peer's? */
static bool mrl_sock_between(int fd, const union mrl_sockaddr *ours,
			     const union mrl_sockaddr *theirs)
{
	union mrl_sockaddr local, remote;
	socklen_t len;
	int proto;

	len = sizeof(proto);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) ||
	    proto != IPPROTO_TCP)
		return false;
	len = sizeof(local);
	if (getsockname(fd, &local.sa, &len))
		return false;
	len = sizeof(remote);
	if (getpeername(fd, &remote.sa, &len))
		return false;	/* a listener, or not connected */
	if (!mrl_sa_same_ip(&remote, theirs) ||
	    (!mrl_sa_wild(ours) && !mrl_sa_same_ip(&local, ours)))
		return false;
	return mrl_sa_port(&local) == mrl_sa_port(ours) ||
	       mrl_sa_port(&remote) == mrl_sa_port(theirs);
}

/*
 * Has the kernel heard nothing on fd for quiet_ms: no ACK of data it
 * still holds, or (unless holding) nothing at all?  holding asks for data
 * that the path, not the peer, holds back: sent, sent again at least once
 * (tcpi_backoff) and unacknowledged, or waiting under an open window with
 * its probes backing off (a link that died with nothing in flight).  A
 * peer's kernel acknowledges what arrives whether its process reads or
 * not; one whose process does not read closes its window (tcpi_snd_wnd
 * 0), and that is not a dead path.  A connection idle for a while and
 * just sent to holds data a moment, not sent again.
 */
static bool mrl_sock_stalled(int fd, unsigned quiet_ms, bool holding)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	bool window;

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return false;
	if (holding) {
		/* kernels before 5.4 do not say the window: in flight only */
		window = len >= offsetof(struct tcp_info, tcpi_snd_wnd) +
				sizeof(ti.tcpi_snd_wnd) &&
			 ti.tcpi_notsent_bytes && ti.tcpi_snd_wnd;
		return (ti.tcpi_unacked || window) && ti.tcpi_backoff &&
		       ti.tcpi_last_ack_recv >= quiet_ms;
	}
	if (ti.tcpi_unacked || ti.tcpi_backoff)
		return ti.tcpi_last_ack_recv >= quiet_ms;
	return ti.tcpi_last_data_recv >= quiet_ms &&
	       ti.tcpi_last_ack_recv >= quiet_ms;
}

/*
 * Drop fd's connection now: connect(AF_UNSPEC) sends the peer a reset and
 * discards the socket's queues.  The socket is then closed but shows its
 * owner nothing to read, and a core that learns of a dead connection from
 * a read (end of stream or an error, as tcp's does) would keep posting to
 * it; shutdown() marks it shut both ways (it answers -ENOTCONN, as for any
 * closed socket, and still sets the mark), as the kernel does to a
 * connection it gave up: the next read fails and the core tears the
 * connection down, to connect again for the next op.
 */
static int mrl_sock_disconnect(int fd)
{
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };

	if (connect(fd, &unspec, sizeof(unspec)))
		return -errno;
	(void) shutdown(fd, SHUT_RDWR);
	return 0;
}

static int mrl_reset_scan(const union mrl_sockaddr *ours,
			  const union mrl_sockaddr *theirs, unsigned quiet_ms,
			  bool holding)
{
	struct dirent *d;
	DIR *dir;
	char *end;
	long fd;
	int n = 0;

	dir = opendir("/proc/self/fd");
	if (!dir)
		return -errno;
	while ((d = readdir(dir))) {
		fd = strtol(d->d_name, &end, 10);
		if (*end || end == d->d_name || fd == dirfd(dir))
			continue;
		if (mrl_sock_between((int) fd, ours, theirs) &&
		    mrl_sock_stalled((int) fd, quiet_ms, holding) &&
		    !mrl_sock_disconnect((int) fd))
			n++;
	}
	closedir(dir);
	return n;
}

static int mrl_sockaddr_of(union mrl_sockaddr *out, const void *addr,
			   size_t len)
{
	const struct sockaddr *sa = addr;

	memset(out, 0, sizeof(*out));
	if (len < sizeof(struct sockaddr_in) ||
	    (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
	    (sa->sa_family == AF_INET6 && len < sizeof(struct sockaddr_in6)))
		return -FI_EINVAL;
	memcpy(out, addr, sa->sa_family == AF_INET ?
	       sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	return 0;
}

int mrl_reset_peer_rail(struct mrl_ep *ep, const struct mrl_peer *peer,
			int rail, unsigned quiet_ms, bool holding)
{
	const struct mrl_addr_hdr *hdr = peer->addr;
	union mrl_sockaddr ours, theirs;
	char name[sizeof(ours)];
	size_t len = sizeof(name);

	if (!mrl_reset_format(ep->domain->rails[rail].info->addr_format) ||
	    !hdr || rail >= hdr->nrails)
		return 0;
	if (fi_getname(&ep->rails[rail].ep->fid, name, &len) ||
	    mrl_sockaddr_of(&ours, name, len) ||
	    mrl_sockaddr_of(&theirs, mrl_addr_rail(hdr, rail),
			    hdr->rail_addrlen))
		return 0;
	return mrl_reset_scan(&ours, &theirs, quiet_ms, holding);
}
