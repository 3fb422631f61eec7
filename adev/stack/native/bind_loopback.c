/* bind_loopback.so: an LD_PRELOAD shim that keeps a process's listeners on one address.
 *
 * Mooncake's store client binds its P2P handshake, TCP transport and offload RPC listeners to
 * the wildcard address (INADDR_ANY / in6addr_any) whatever MC_TCP_BIND_ADDRESS says. This shim
 * replaces a wildcard in bind() with the address in ADEV_BIND_ADDRESS (an IPv4 or IPv6
 * literal): an IPv4 wildcard becomes that IPv4 address; an IPv6 wildcard becomes the IPv6
 * address, or the IPv4-mapped form (::ffff:a.b.c.d) of an IPv4 one, so that dual-stack
 * listeners still take the IPv4 connections their peers make. Binds to a specific address are
 * left alone. Without ADEV_BIND_ADDRESS (or with an unparsable one) nothing is changed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind)
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *want = getenv("ADEV_BIND_ADDRESS");
    struct in_addr v4;
    struct in6_addr v6;
    int is_v4 = want && inet_pton(AF_INET, want, &v4) == 1;
    int is_v6 = !is_v4 && want && inet_pton(AF_INET6, want, &v6) == 1;
    if (!addr || !(is_v4 || is_v6))
        return real_bind(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in) && is_v4) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a.sin_addr = v4;
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
            if (is_v6) {
                a.sin6_addr = v6;
            } else {
                memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
                a.sin6_addr.s6_addr[10] = 0xff;
                a.sin6_addr.s6_addr[11] = 0xff;
                memcpy(&a.sin6_addr.s6_addr[12], &v4, 4);
            }
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real_bind(fd, addr, len);
}
