/* fi_rma_base: the libfabric baseline of bench/efa.sh, standing in for
 * fabtests' fi_rma_bw where it is not packaged (Debian). Two processes
 * (this one and a forked target) open the same provider with the hints the
 * efa transport uses (FI_EP_RDM, FI_RMA, FI_DELIVERY_COMPLETE, MR modes
 * LOCAL|VIRT_ADDR|ALLOCATED|PROV_KEY), trade endpoint addresses and keys
 * over pipes, and the initiator keeps WINDOW fi_write or fi_read of one
 * size in flight for SECONDS, printing GB/s (1e9 bytes per second).
 *
 *   fi_rma_base PROVIDER write|read SIZE [SECONDS [WINDOW]]
 *
 * A bench tool, built by bench/efa.sh only where libfabric-dev is
 * installed. libfabric's headers (rdma/fabric.h, fi_cm.h, fi_domain.h,
 * fi_endpoint.h, fi_errno.h, fi_rma.h) come from bench/efa.sh's cc
 * command line (-include), as the tests' layout checks take them: no file
 * of ours names an optional library's header. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (64UL << 20)

struct side {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr;
	char *buf;
	char addr[256];
	size_t addrlen;
};

/* what each side tells the other */
struct card {
	char addr[256];
	uint64_t addrlen, key, base;
};

static void die(const char *what, int ret) {
	fprintf(stderr, "fi_rma_base: %s: %s\n", what, fi_strerror(ret < 0 ? -ret : ret));
	exit(1);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void open_side(struct side *s, const char *prov) {
	struct fi_info *hints = fi_allocinfo();
	hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	hints->fabric_attr->prov_name = strdup(prov);
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->info);
	fi_freeinfo(hints);
	if (ret) die("fi_getinfo", ret);
	if ((ret = fi_fabric(s->info->fabric_attr, &s->fabric, NULL))) die("fi_fabric", ret);
	if ((ret = fi_domain(s->fabric, s->info, &s->domain, NULL))) die("fi_domain", ret);
	struct fi_av_attr av = {.type = FI_AV_TABLE, .count = 4};
	if ((ret = fi_av_open(s->domain, &av, &s->av, NULL))) die("fi_av_open", ret);
	/* a wait object, as the transport's: a waiting side sleeps in the
	 * provider (which progresses it) instead of spinning on a busy host */
	struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_CONTEXT, .size = 4096, .wait_obj = FI_WAIT_UNSPEC};
	if ((ret = fi_cq_open(s->domain, &cq, &s->cq, NULL))) die("fi_cq_open", ret);
	if ((ret = fi_endpoint(s->domain, s->info, &s->ep, NULL))) die("fi_endpoint", ret);
	if ((ret = fi_ep_bind(s->ep, &s->av->fid, 0))) die("fi_ep_bind av", ret);
	if ((ret = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV))) die("fi_ep_bind cq", ret);
	if ((ret = fi_enable(s->ep))) die("fi_enable", ret);
	s->addrlen = sizeof(s->addr);
	if ((ret = fi_getname(&s->ep->fid, s->addr, &s->addrlen))) die("fi_getname", ret);
	if (posix_memalign((void **)&s->buf, 4096, BUF_SIZE)) die("posix_memalign", ENOMEM);
	memset(s->buf, 1, BUF_SIZE);
	ret = fi_mr_reg(s->domain, s->buf, BUF_SIZE, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &s->mr, NULL);
	if (ret) die("fi_mr_reg", ret);
}

static void close_side(struct side *s) {
	fi_close(&s->mr->fid);
	fi_close(&s->ep->fid);
	fi_close(&s->cq->fid);
	fi_close(&s->av->fid);
	fi_close(&s->domain->fid);
	fi_close(&s->fabric->fid);
	fi_freeinfo(s->info);
	free(s->buf);
}

static void put_card(int fd, struct side *s) {
	struct card c = {.addrlen = s->addrlen, .key = fi_mr_key(s->mr), .base = (uint64_t)(uintptr_t)s->buf};
	memcpy(c.addr, s->addr, s->addrlen);
	if (write(fd, &c, sizeof c) != sizeof c) die("pipe write", errno);
}

static void get_card(int fd, struct card *c) {
	if (read(fd, c, sizeof *c) != sizeof *c) die("pipe read", errno);
}

/* target: progress its endpoint (manual-progress providers need it) until
 * the initiator closes the pipe */
static int target(const char *prov, int in, int out) {
	struct side s;
	open_side(&s, prov);
	put_card(out, &s);
	struct card peer;
	get_card(in, &peer);
	fi_addr_t fa;
	if (fi_av_insert(s.av, peer.addr, 1, &fa, 0, NULL) != 1) die("fi_av_insert", -FI_EINVAL);
	struct fi_cq_entry e[16];
	for (;;) {
		fi_cq_sread(s.cq, e, 16, NULL, 50);
		struct pollfd p = {.fd = in, .events = POLLIN};
		if (poll(&p, 1, 0) > 0) break; /* EOF: the initiator is done */
	}
	close_side(&s);
	return 0;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: fi_rma_base PROVIDER write|read SIZE [SECONDS [WINDOW]]\n");
		return 2;
	}
	const char *prov = argv[1];
	int is_write = strcmp(argv[2], "write") == 0;
	size_t size = strtoull(argv[3], NULL, 0);
	double seconds = argc > 4 ? atof(argv[4]) : 5;
	int window = argc > 5 ? atoi(argv[5]) : 16;
	if (size == 0 || size > BUF_SIZE || window < 1 || window > 1024) {
		fprintf(stderr, "fi_rma_base: size 1..%lu, window 1..1024\n", BUF_SIZE);
		return 2;
	}
	int down[2], up[2];
	if (pipe(down) || pipe(up)) die("pipe", errno);
	pid_t pid = fork();
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		return target(prov, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	struct side s;
	open_side(&s, prov);
	struct card peer;
	get_card(up[0], &peer);
	put_card(down[1], &s);
	fi_addr_t fa;
	if (fi_av_insert(s.av, peer.addr, 1, &fa, 0, NULL) != 1) die("fi_av_insert", -FI_EINVAL);
	uint64_t base = (s.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? peer.base : 0;
	void *desc = fi_mr_desc(s.mr);
	size_t slots = BUF_SIZE / size;
	struct fi_context2 *ctx = calloc(window, sizeof *ctx);
	uint64_t posted = 0, done = 0;
	double start = now(), stop = start + seconds;
	int inflight = 0;
	struct fi_cq_entry e[64];
	for (;;) {
		int over = now() >= stop;
		while (!over && inflight < window) {
			size_t off = (posted % slots) * size;
			ssize_t r = is_write ? fi_write(s.ep, s.buf + off, size, desc, fa, base + off, peer.key, &ctx[posted % window])
			                     : fi_read(s.ep, s.buf + off, size, desc, fa, base + off, peer.key, &ctx[posted % window]);
			if (r == -FI_EAGAIN) break;
			if (r) die(is_write ? "fi_write" : "fi_read", (int)r);
			posted++;
			inflight++;
		}
		/* nothing more to post: sleep in the provider until a completion */
		ssize_t n = !(inflight >= window || over) ? fi_cq_read(s.cq, e, 64) : fi_cq_sread(s.cq, e, 64, NULL, 1);
		if (n > 0) {
			done += n;
			inflight -= n;
		} else if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(s.cq, &err, 0);
			die("completion", -err.err);
		} else if (n != -FI_EAGAIN) {
			die("fi_cq_read", (int)n);
		}
		if (over && inflight == 0) break;
	}
	double secs = now() - start;
	printf("%s %zu %.3f GB/s (%llu ops in %.2f s, window %d, provider %s)\n", argv[2], size, (double)done * size / secs / 1e9,
	       (unsigned long long)done, secs, window, s.info->fabric_attr->prov_name);
	close(down[1]);
	int st;
	waitpid(pid, &st, 0);
	close_side(&s);
	free(ctx);
	return 0;
}
