/* Routing by business key in C: a routed record's partition costs capture one call (a
 * routed snapshot row cost 1.36x an unrouted one's CPU in Python, half of it murmur2).
 * Its own extension module, bizevents.contracts.technical._routing (built by
 * contracts/avro_codegen/build.py with the others), of the contracts floor.
 *
 *   murmur2(data) -> int
 *       Kafka's Utils.murmur2 of data (bytes), a signed 32-bit int as Java returns it.
 *   long_partition(key, offset, skip, partitions) -> int
 *       Kafka's partition, among partitions, of b"%d" of the Avro long (zigzag varint)
 *       found in key after offset bytes and skip other longs: a key routed by one
 *       integer column, its routing key read without decoding the key.
 *       A varint cut short or longer than 64 bits raises ValueError(reason).
 *
 * routing.py holds the Python both must equal (tests/contracts/test_routing.py, and
 * tests/hostile.py under ASan and UBSan) and falls back to it when this is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_text.h"

#define SEED 0x9747b28cu
#define M 0x5bd1e995u

static int32_t hash(const unsigned char *data, Py_ssize_t length) {
    uint32_t h = SEED ^ (uint32_t)length;
    Py_ssize_t end = length - length % 4;
    for (Py_ssize_t i = 0; i < end; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
                     (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
        k *= M;
        k ^= k >> 24;
        k *= M;
        h = (h * M) ^ k;
    }
    switch (length - end) {
        case 3: h ^= (uint32_t)data[end + 2] << 16; /* fall through */
        case 2: h ^= (uint32_t)data[end + 1] << 8;  /* fall through */
        case 1:
            h ^= (uint32_t)data[end];
            h *= M;
    }
    h ^= h >> 13;
    h *= M;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *murmur2(PyObject *Py_UNUSED(module), PyObject *data) {
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "murmur2 takes bytes");
        return NULL;
    }
    return PyLong_FromLong(
        hash((const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)));
}

/* The zigzag varint at *pos (advanced past it); -1 with ValueError set when malformed. */
static int read_long(const unsigned char *data, Py_ssize_t size, Py_ssize_t *pos, int64_t *out) {
    uint64_t u = 0;
    for (int shift = 0;; shift += 7) {
        if (shift > 63) {
            PyErr_SetString(PyExc_ValueError, "a varint longer than 64 bits");
            return -1;
        }
        if (*pos >= size) {
            PyErr_SetString(PyExc_ValueError, "a varint cut short");
            return -1;
        }
        unsigned char b = data[(*pos)++];
        if (shift == 63 && (b & 0x7e)) {
            PyErr_SetString(PyExc_ValueError, "a varint longer than 64 bits");
            return -1;
        }
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
    }
    *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return 0;
}

static PyObject *long_partition(PyObject *Py_UNUSED(module), PyObject *const *args,
                                Py_ssize_t nargs) {
    if (nargs != 4 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "long_partition(key: bytes, offset, skip, partitions)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    Py_ssize_t skip = PyLong_AsSsize_t(args[2]);
    long partitions = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (offset < 0 || skip < 0 || partitions < 1 || partitions > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "offset and skip >= 0, 1 <= partitions < 2**31");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t pos = offset;
    int64_t value = 0;
    for (Py_ssize_t i = 0; i <= skip; i++) {
        if (read_long(data, size, &pos, &value) < 0) return NULL;
    }
    char text[20];
    int length = decimal_text((long long)value, text);
    int32_t h = hash((const unsigned char *)text, length);
    return PyLong_FromLong((long)(((uint32_t)h & 0x7fffffffu) % (uint32_t)partitions));
}

PyDoc_STRVAR(murmur2_doc, "Kafka's murmur2 of data, a signed 32-bit int.");
PyDoc_STRVAR(long_partition_doc,
             "Kafka's partition of b'%d' of the Avro long in key after offset bytes and skip longs.");

static PyMethodDef methods[] = {
    {"murmur2", murmur2, METH_O, murmur2_doc},
    {"long_partition", (PyCFunction)(void (*)(void))long_partition, METH_FASTCALL,
     long_partition_doc},
    {NULL, NULL, 0, NULL},
};

/* The module "_routing": no state of its own (m_size -1). */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_routing",
                                    "Routing by business key in C (see contracts/technical/routing.py).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__routing(void) { return PyModule_Create(&module); }
