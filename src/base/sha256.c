/*
 * sha256.c - SHA-256 (FIPS 180-4, section 6.2) and HMAC-SHA256 (RFC 2104), the keyed hash
 * that proves knowledge of a communicator's secret without sending it.
 *
 * Small and portable rather than fast: it hashes a few hundred bytes per connection.
 */
#include "net.h"

#include <string.h>

#define SHA256_BLOCK 64

struct sha256 {
    uint32_t h[8];   /* intermediate hash value H(i) */
    uint64_t nbytes; /* message length so far */
    uint8_t buf[SHA256_BLOCK];
    size_t nbuf; /* bytes waiting in buf for a full block */
};

/* First 32 bits of the fractional parts of the cube roots of the first 64 primes (4.2.2). */
static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Square roots of the first 8 primes (5.3.3). */
static const uint32_t sha256_h0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

/* The functions of 4.1.2. */
#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define BSIG0(x) (rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22))
#define BSIG1(x) (rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25))
#define SSIG0(x) (rotr(x, 7) ^ rotr(x, 18) ^ ((x) >> 3))
#define SSIG1(x) (rotr(x, 17) ^ rotr(x, 19) ^ ((x) >> 10))

/* One 512-bit block: message schedule W[0..63], then 64 rounds (6.2.2). */
static void sha256_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, hh;
    int t;

    for (t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    for (t = 16; t < 64; t++)
        w[t] = SSIG1(w[t - 2]) + w[t - 7] + SSIG0(w[t - 15]) + w[t - 16];
    a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (t = 0; t < 64; t++) {
        uint32_t t1 = hh + BSIG1(e) + CH(e, f, g) + sha256_k[t] + w[t];
        uint32_t t2 = BSIG0(a) + MAJ(a, b, c);
        hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

static void sha256_init(struct sha256 *s)
{
    memcpy(s->h, sha256_h0, sizeof(s->h));
    s->nbytes = 0;
    s->nbuf = 0;
}

static void sha256_update(struct sha256 *s, const void *msg, size_t len)
{
    const uint8_t *p = msg;

    s->nbytes += len;
    if (s->nbuf > 0) {
        size_t take = COLL_MIN(len, SHA256_BLOCK - s->nbuf);
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take, p += take, len -= take;
        if (s->nbuf < SHA256_BLOCK)
            return;
        sha256_block(s->h, s->buf);
        s->nbuf = 0;
    }
    for (; len >= SHA256_BLOCK; p += SHA256_BLOCK, len -= SHA256_BLOCK)
        sha256_block(s->h, p);
    memcpy(s->buf, p, len);
    s->nbuf = len;
}

/* Padding (5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, the bit length big-endian. */
static void sha256_final(struct sha256 *s, uint8_t out[32])
{
    uint64_t bits = s->nbytes * 8;
    uint8_t pad[SHA256_BLOCK + 8] = {0x80};
    size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf;

    for (int i = 0; i < 8; i++)
        pad[npad + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, npad + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void coll__sha256(const void *msg, size_t len, uint8_t out[32])
{
    struct sha256 s;

    sha256_init(&s);
    sha256_update(&s, msg, len);
    sha256_final(&s, out);
}

/* HMAC(K, m) = H((K0 ^ opad) | H((K0 ^ ipad) | m)), K0 = K (or H(K) when longer than a
 * block) padded with zeros to a block. */
void coll__hmac_sha256(const uint8_t *key, size_t keylen, const void *msg, size_t len,
                       uint8_t out[COLL_MAC_BYTES])
{
    uint8_t k0[SHA256_BLOCK] = {0}, pad[SHA256_BLOCK], inner[32];
    struct sha256 s;

    if (keylen > SHA256_BLOCK)
        coll__sha256(key, keylen, k0);
    else if (keylen > 0)
        memcpy(k0, key, keylen);

    for (int i = 0; i < SHA256_BLOCK; i++)
        pad[i] = k0[i] ^ 0x36;
    sha256_init(&s);
    sha256_update(&s, pad, sizeof(pad));
    sha256_update(&s, msg, len);
    sha256_final(&s, inner);

    for (int i = 0; i < SHA256_BLOCK; i++)
        pad[i] = k0[i] ^ 0x5c;
    sha256_init(&s);
    sha256_update(&s, pad, sizeof(pad));
    sha256_update(&s, inner, sizeof(inner));
    sha256_final(&s, out);
}

/* Time independent of where a and b differ, so that a stranger cannot find a valid MAC
 * byte by byte from response times. */
bool coll__mac_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t acc = 0;

    for (size_t i = 0; i < n; i++)
        acc |= a[i] ^ b[i];
    return acc == 0;
}
