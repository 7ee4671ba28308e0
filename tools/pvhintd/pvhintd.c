/* SPDX-License-Identifier: MIT */
/*
 * pvhintd: loads the bpf hint source's program once (as root, or with CAP_BPF + CAP_PERFMON)
 * and serves its page to processes that may not load it (libpvhint connects when its own load
 * is refused). Who may use it is the socket's group: 0660, owned by --group.
 *
 * usage: pvhintd [--socket PATH] [--group NAME]
 *   --socket  default /run/pvhint/pvhintd.sock (its directory is created 0755 if missing); with
 *             systemd socket activation (LISTEN_FDS=1) the socket is fd 3 and this is ignored
 *   --group   group allowed to connect (default: the daemon's own group)
 * Stops on SIGTERM or SIGINT, removing the socket it created. pvhintd.service runs it.
 */
#define _GNU_SOURCE
#include <pvrt/pvhint.h>

#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static volatile int stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int usage(void)
{
	fprintf(stderr, "usage: pvhintd [--socket PATH] [--group NAME]\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *path = PVHINT_BPF_SOCKET_PATH, *group = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			path = argv[++i];
		else if (!strcmp(argv[i], "--group") && i + 1 < argc)
			group = argv[++i];
		else
			return usage();
	}
	gid_t gid = getgid();
	if (group) {
		struct group *g = getgrnam(group);
		if (!g) {
			fprintf(stderr, "pvhintd: no group '%s'\n", group);
			return 1;
		}
		gid = g->gr_gid;
	}
	int fd;
	bool own = false;
	const char *lf = getenv("LISTEN_FDS"), *lp = getenv("LISTEN_PID");
	if (lf && lp && atoi(lf) == 1 && atoi(lp) == (int)getpid()) {
		fd = 3; /* systemd made it, with its permissions */
	} else {
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		if (strlen(path) >= sizeof(a.sun_path)) {
			fprintf(stderr, "pvhintd: socket path too long: %s\n", path);
			return 1;
		}
		strcpy(a.sun_path, path);
		char dir[sizeof(a.sun_path)];
		snprintf(dir, sizeof(dir), "%s", path);
		if (mkdir(dirname(dir), 0755) && errno != EEXIST) {
			fprintf(stderr, "pvhintd: cannot create %s: %s\n", dir, strerror(errno));
			return 1;
		}
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		/* A socket left by a daemon that died is replaced; a live one refuses us. */
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			fprintf(stderr, "pvhintd: another pvhintd serves %s\n", path);
			return 1;
		}
		unlink(path);
		/* Created 0600, then opened to the group: never wider than asked. */
		mode_t old = umask(0177);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64)) {
			fprintf(stderr, "pvhintd: cannot listen on %s: %s\n", path,
				strerror(errno));
			return 1;
		}
		umask(old);
		if (chown(path, (uid_t)-1, gid) || chmod(path, 0660)) {
			fprintf(stderr, "pvhintd: cannot give %s to its group: %s\n", path,
				strerror(errno));
			unlink(path);
			return 1;
		}
		own = true;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "pvhintd: serving %s\n", own ? path : "the socket systemd passed");
	int r = pvhint_bpf_serve(fd, &stop);
	if (r)
		fprintf(stderr, "pvhintd: %s\n", pvhint_errmsg());
	if (own)
		unlink(path);
	return r ? 1 : 0;
}
