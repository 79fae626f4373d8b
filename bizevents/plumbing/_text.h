/* What the project's C extensions share (contracts/avro_codegen/_native.c,
 * translators/_lineage.c, capture/postgres/_tuples.c): a growing byte buffer and the Avro
 * varints and decimal text written into it. Header-only (static inline): each extension
 * compiles its own copy.
 */
#ifndef BIZEVENTS_TEXT_H
#define BIZEVENTS_TEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Bytes built in one buffer (on the stack while they fit). */
typedef struct {
    char *data;
    Py_ssize_t size, capacity;
    char stack[256];
} Text;

static inline void text_init(Text *t) {
    t->data = t->stack;
    t->size = 0;
    t->capacity = sizeof t->stack;
}

static inline void text_free(Text *t) {
    if (t->data != t->stack) PyMem_Free(t->data);
}

static inline int text_add(Text *t, const char *p, Py_ssize_t n) {
    if (t->size + n > t->capacity) {
        Py_ssize_t capacity = 2 * (t->size + n);
        char *data = PyMem_Malloc((size_t)capacity);
        if (data == NULL) { PyErr_NoMemory(); return -1; }
        memcpy(data, t->data, (size_t)t->size);
        text_free(t);
        t->data = data;
        t->capacity = capacity;
    }
    memcpy(t->data + t->size, p, (size_t)n);
    t->size += n;
    return 0;
}

/* A zigzag varint of value into out (at most 10 bytes); its length. */
static inline int zigzag(long long value, unsigned char *out) {
    unsigned long long n = ((unsigned long long)value << 1) ^ (unsigned long long)(value >> 63);
    int i = 0;
    while (n > 0x7F) { out[i++] = (unsigned char)((n & 0x7F) | 0x80); n >>= 7; }
    out[i++] = (unsigned char)n;
    return i;
}

/* A zigzag varint (an Avro int or long). */
static inline int put_varint(Text *out, long long value) {
    unsigned char bytes[10];
    return text_add(out, (const char *)bytes, zigzag(value, bytes));
}

/* An Avro string or bytes: the length, then the bytes. */
static inline int put_blob_of(Text *out, const char *data, Py_ssize_t size) {
    return put_varint(out, size) < 0 ? -1 : text_add(out, data, size);
}

/* The decimal text of value into out (at most 20 characters, no NUL); its length.
 * (snprintf's format parsing cost more than the rest of a change's lineage.) */
static inline int decimal_text(long long value, char *out) {
    char reversed[20];
    unsigned long long magnitude =
        value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    int n = 0, length = 0;
    do {
        reversed[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude != 0);
    if (value < 0) out[length++] = '-';
    while (n > 0) out[length++] = reversed[--n];
    return length;
}

#endif
