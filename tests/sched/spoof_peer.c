/* Description: a peer of cudawd that breaks the rules, for sched.users: it joins, then reports a
 * swap cudawd never asked of it (as if it had been swapped out, so that cudawd would stop
 * counting its memory), and asks for the priority of PID. It prints cudawd's answer to the
 * priority request; cudawd's log must show the report ignored.
 *   usage: sched_spoof_peer SOCKET PID        exit 0: it could talk to cudawd, 1: it could not */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sched_proto.h"

static int say(int fd, struct sched_msg msg)
{
  msg.version = SCHED_PROTO_VERSION;
  if (!msg.pid) msg.pid = getpid();
  return send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg ? 0 : -1;
}

int main(int argc, char **argv)
{
  if (argc != 3) {
    fprintf(stderr, "usage: %s SOCKET PID\n", argv[0]);
    return 2;
  }
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", argv[1]);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    printf("spoof_peer: connect %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  struct sched_msg reply = {0};
  if (say(fd, (struct sched_msg){.type = SCHED_HELLO}) ||
      say(fd, (struct sched_msg){.type = SCHED_DONE, .value = 1, .bytes = 1u << 30}) ||
      say(fd, (struct sched_msg){.type = SCHED_PRIORITY, .pid = atoi(argv[2]), .value = 100})) {
    printf("spoof_peer: send: %s\n", strerror(errno));
    return 1;
  }
  do { /* cudawd may ask a joined program for other things meanwhile: skip them */
    if (recv(fd, &reply, sizeof reply, 0) != (ssize_t)sizeof reply) {
      printf("spoof_peer: cudawd closed the connection: %s\n", strerror(errno));
      return 1;
    }
  } while (reply.type != SCHED_REPLY);
  printf("spoof_peer: priority of pid %s: status %d (%s)\n", argv[2], reply.status,
         reply.status ? strerror(-reply.status) : "set");
  close(fd);
  return 0;
}
