/* Lineage on the wire, compiled: what translators/lineage.py's Stamper computes per
 * event and origin() per change, without the Python in between.
 *
 *   event_id(namespace, name) -> str
 *       str(uuid.uuid5(UUID(bytes=namespace), name)): SHA-1 (FIPS 180-4) of the
 *       namespace's 16 bytes and the name's UTF-8, version 5, RFC 4122 variant.
 *   wire(stamper, identity, contract, ordinal, change_avro, change_headers)
 *       -> (event id, lineage record's Avro bytes, headers list)
 *       stamper = (namespace, "|name|" as UTF-8, translator part's Avro bytes,
 *                  translator headers tuple, replay, event-id header's name,
 *                  replay header)
 *   change_part(offset, position, tx_id, offset header, position header, tx header)
 *       -> (change part's Avro bytes, headers tuple)
 *   origin(cls, name, table, op, where, key, offset, position, tx_id, header names)
 *       -> cls(the change's identity, change part, headers): lineage.origin_of's work
 *
 * tests/translators/test_lineage_native.py holds each equal to the Python it replaces
 * (hypothesis), and translators/lineage.py falls back to that Python when this module
 * is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- SHA-1 ---------------------------------------------------------------------------- */

typedef struct {
    uint32_t h[5];
    uint64_t length;        /* bytes hashed so far */
    unsigned char block[64];
    size_t used;            /* bytes waiting in block */
} Sha1;

#define ROTL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

static void sha1_block(Sha1 *s, const unsigned char *p) {
    uint32_t w[80];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    for (int t = 16; t < 80; t++) w[t] = ROTL(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
        else if (t < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
        else if (t < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
        else { f = b ^ c ^ d; k = 0xCA62C1D6; }
        uint32_t temp = ROTL(a, 5) + f + e + k + w[t];
        e = d; d = c; c = ROTL(b, 30); b = a; a = temp;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d; s->h[4] += e;
}

static void sha1_init(Sha1 *s) {
    s->h[0] = 0x67452301; s->h[1] = 0xEFCDAB89; s->h[2] = 0x98BADCFE;
    s->h[3] = 0x10325476; s->h[4] = 0xC3D2E1F0;
    s->length = 0;
    s->used = 0;
}

static void sha1_update(Sha1 *s, const unsigned char *p, size_t n) {
    s->length += n;
    while (n > 0) {
        size_t take = 64 - s->used;
        if (take > n) take = n;
        memcpy(s->block + s->used, p, take);
        s->used += take; p += take; n -= take;
        if (s->used == 64) { sha1_block(s, s->block); s->used = 0; }
    }
}

static void sha1_final(Sha1 *s, unsigned char out[20]) {
    uint64_t bits = s->length * 8;
    unsigned char pad = 0x80;
    sha1_update(s, &pad, 1);
    unsigned char zero = 0;
    while (s->used != 56) sha1_update(s, &zero, 1);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha1_update(s, len, 8);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24); out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8); out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

/* The UUIDv5 text of a finished hash: 36 characters into out. */
static void uuid5_text(Sha1 *s, char out[36]) {
    static const char HEX[] = "0123456789abcdef";
    unsigned char d[20];
    sha1_final(s, d);
    d[6] = (d[6] & 0x0F) | 0x50;  /* version 5 */
    d[8] = (d[8] & 0x3F) | 0x80;  /* RFC 4122 variant */
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = HEX[d[i] >> 4];
        out[o++] = HEX[d[i] & 0x0F];
    }
}

static int namespace_of(PyObject *obj, Sha1 *s) {
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != 16) {
        PyErr_SetString(PyExc_TypeError, "the namespace is a UUID's 16 bytes");
        return -1;
    }
    sha1_init(s);
    sha1_update(s, (const unsigned char *)PyBytes_AS_STRING(obj), 16);
    return 0;
}

static const char *utf8_of(PyObject *obj, Py_ssize_t *size, const char *what) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(obj, size);
}

static PyObject *event_id(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "event_id(namespace, name)");
        return NULL;
    }
    Sha1 s;
    if (namespace_of(args[0], &s) < 0) return NULL;
    Py_ssize_t size;
    const char *name = utf8_of(args[1], &size, "the name");
    if (name == NULL) return NULL;
    sha1_update(&s, (const unsigned char *)name, (size_t)size);
    char text[36];
    uuid5_text(&s, text);
    return PyUnicode_FromStringAndSize(text, 36);
}

/* -- Avro ----------------------------------------------------------------------------- */

/* A zigzag varint of value into out (at most 10 bytes); its length. */
static int zigzag(long long value, unsigned char *out) {
    unsigned long long n = ((unsigned long long)value << 1) ^ (unsigned long long)(value >> 63);
    int i = 0;
    while (n > 0x7F) { out[i++] = (unsigned char)((n & 0x7F) | 0x80); n >>= 7; }
    out[i++] = (unsigned char)n;
    return i;
}

static PyObject *pair(PyObject *name, PyObject *value) {
    return PyTuple_Pack(2, name, value);
}

/* -- per event ------------------------------------------------------------------------ */

static PyObject *wire(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "wire(stamper, identity, contract, ordinal, change_avro, change_headers)");
        return NULL;
    }
    PyObject *stamper = args[0];
    PyObject *name = PyTuple_GET_ITEM(stamper, 1), *translator = PyTuple_GET_ITEM(stamper, 2);
    PyObject *fixed = PyTuple_GET_ITEM(stamper, 3);
    int replay = PyObject_IsTrue(PyTuple_GET_ITEM(stamper, 4));
    PyObject *change = args[4], *change_headers = args[5];
    if (replay < 0) return NULL;
    if (!PyBytes_Check(name) || !PyBytes_Check(translator) || !PyTuple_Check(fixed) ||
        !PyBytes_Check(change) || !PyTuple_Check(change_headers)) {
        PyErr_SetString(PyExc_TypeError, "wire: a part has the wrong type");
        return NULL;
    }
    long long ordinal = PyLong_AsLongLong(args[3]);
    if (ordinal == -1 && PyErr_Occurred()) return NULL;

    Sha1 s;
    if (namespace_of(PyTuple_GET_ITEM(stamper, 0), &s) < 0) return NULL;
    Py_ssize_t size;
    const char *text = utf8_of(args[1], &size, "the identity");
    if (text == NULL) return NULL;
    sha1_update(&s, (const unsigned char *)text, (size_t)size);
    sha1_update(&s, (const unsigned char *)PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name));
    text = utf8_of(args[2], &size, "the contract");
    if (text == NULL) return NULL;
    sha1_update(&s, (const unsigned char *)text, (size_t)size);
    char number[24];
    int digits = snprintf(number, sizeof number, "|%lld", ordinal);
    sha1_update(&s, (const unsigned char *)number, (size_t)digits);
    char eid[36];
    uuid5_text(&s, eid);

    /* the lineage record: text(event id) + translator part + change part + replay */
    Py_ssize_t tsize = PyBytes_GET_SIZE(translator), csize = PyBytes_GET_SIZE(change);
    PyObject *lineage = PyBytes_FromStringAndSize(NULL, 1 + 36 + tsize + csize + 1);
    if (lineage == NULL) return NULL;
    char *out = PyBytes_AS_STRING(lineage);
    out[0] = 72;  /* zigzag(36) */
    memcpy(out + 1, eid, 36);
    memcpy(out + 37, PyBytes_AS_STRING(translator), (size_t)tsize);
    memcpy(out + 37 + tsize, PyBytes_AS_STRING(change), (size_t)csize);
    out[37 + tsize + csize] = replay ? 1 : 0;

    PyObject *eid_text = PyUnicode_FromStringAndSize(eid, 36);
    PyObject *eid_bytes = PyBytes_FromStringAndSize(eid, 36);
    Py_ssize_t nfixed = PyTuple_GET_SIZE(fixed), nchange = PyTuple_GET_SIZE(change_headers);
    PyObject *headers = PyList_New(1 + nfixed + nchange + 1);
    PyObject *first = eid_bytes ? pair(PyTuple_GET_ITEM(stamper, 5), eid_bytes) : NULL;
    Py_XDECREF(eid_bytes);
    if (eid_text == NULL || headers == NULL || first == NULL) {
        Py_XDECREF(eid_text);
        Py_XDECREF(headers);
        Py_XDECREF(first);
        Py_DECREF(lineage);
        return NULL;
    }
    PyList_SET_ITEM(headers, 0, first);
    for (Py_ssize_t i = 0; i < nfixed; i++)
        PyList_SET_ITEM(headers, 1 + i, Py_NewRef(PyTuple_GET_ITEM(fixed, i)));
    for (Py_ssize_t i = 0; i < nchange; i++)
        PyList_SET_ITEM(headers, 1 + nfixed + i, Py_NewRef(PyTuple_GET_ITEM(change_headers, i)));
    PyList_SET_ITEM(headers, 1 + nfixed + nchange, Py_NewRef(PyTuple_GET_ITEM(stamper, 6)));
    PyObject *result = PyTuple_New(3);
    if (result == NULL) { Py_DECREF(headers); Py_DECREF(eid_text); Py_DECREF(lineage); return NULL; }
    PyTuple_SET_ITEM(result, 0, eid_text);
    PyTuple_SET_ITEM(result, 1, lineage);
    PyTuple_SET_ITEM(result, 2, headers);
    return result;
}

/* -- per change ----------------------------------------------------------------------- */

static PyObject *change_part(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "change_part(offset, position, tx_id, offset_header, position_header, "
                        "tx_header)");
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[0]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t psize, tsize = 0;
    const char *position = utf8_of(args[1], &psize, "the position");
    if (position == NULL) return NULL;
    const char *tx = NULL;
    if (args[2] != Py_None) {
        tx = utf8_of(args[2], &tsize, "the transaction id");
        if (tx == NULL) return NULL;
    }
    /* zigzag(offset) + text(position) + union branch [+ text(tx_id)] */
    unsigned char head[10], plen[10], tlen[10];
    int nhead = zigzag(offset, head), nplen = zigzag(psize, plen);
    int ntlen = tx ? zigzag(tsize, tlen) : 0;
    Py_ssize_t total = nhead + nplen + psize + 1 + (tx ? ntlen + tsize : 0);
    PyObject *avro = PyBytes_FromStringAndSize(NULL, total);
    if (avro == NULL) return NULL;
    char *out = PyBytes_AS_STRING(avro);
    memcpy(out, head, nhead); out += nhead;
    memcpy(out, plen, nplen); out += nplen;
    memcpy(out, position, (size_t)psize); out += psize;
    *out++ = tx ? 2 : 0;  /* union branch: null is 0, string is 1 (zigzag 2) */
    if (tx) { memcpy(out, tlen, ntlen); out += ntlen; memcpy(out, tx, (size_t)tsize); }

    char digits[24];
    int ndigits = snprintf(digits, sizeof digits, "%lld", offset);
    PyObject *values[3] = {
        PyBytes_FromStringAndSize(digits, ndigits),
        PyBytes_FromStringAndSize(position, psize),
        tx ? PyBytes_FromStringAndSize(tx, tsize) : NULL,
    };
    Py_ssize_t nheaders = tx ? 3 : 2;
    PyObject *headers = PyTuple_New(nheaders);
    int ok = headers != NULL && values[0] != NULL && values[1] != NULL && (!tx || values[2]);
    for (Py_ssize_t i = 0; ok && i < nheaders; i++) {
        PyObject *header = pair(args[3 + i], values[i]);
        if (header == NULL) ok = 0;
        else PyTuple_SET_ITEM(headers, i, header);
    }
    for (int i = 0; i < 3; i++) Py_XDECREF(values[i]);
    if (!ok) { Py_XDECREF(headers); Py_DECREF(avro); return NULL; }
    PyObject *result = PyTuple_Pack(2, avro, headers);
    Py_DECREF(avro);
    Py_DECREF(headers);
    return result;
}

/* The canonical JSON of a key whose values are all exact ints and strs (what
 * lineage.canonical_key builds), appended to text; 1 when done, 0 when a value is of
 * another type (the caller then lets the Python encoder do it), -1 on error. */
static PyObject *quote;  /* json.encoder.encode_basestring_ascii */

static int append(PyObject *text, PyObject *part) {
    if (part == NULL) return -1;
    int failed = PyList_Append(text, part);
    Py_DECREF(part);
    return failed;
}

static int canonical_key(PyObject *key, PyObject *text) {
    PyObject *names = PyDict_Keys(key);
    if (names == NULL || PyList_Sort(names) < 0) { Py_XDECREF(names); return -1; }
    int done = 1;
    Py_ssize_t n = PyList_GET_SIZE(names);
    if (append(text, PyUnicode_FromString("{")) < 0) done = -1;
    for (Py_ssize_t i = 0; done == 1 && i < n; i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        PyObject *value = PyDict_GetItemWithError(key, name);
        if (value == NULL) { done = PyErr_Occurred() ? -1 : 0; break; }
        if (!PyUnicode_CheckExact(name) || !(PyLong_CheckExact(value) || PyUnicode_CheckExact(value))) {
            done = 0;
            break;
        }
        if ((i > 0 && append(text, PyUnicode_FromString(",")) < 0) ||
            append(text, PyObject_CallOneArg(quote, name)) < 0 ||
            append(text, PyUnicode_FromString(":")) < 0 ||
            append(text, PyLong_CheckExact(value) ? PyObject_Repr(value)
                                                  : PyObject_CallOneArg(quote, value)) < 0)
            done = -1;
    }
    if (done == 1 && append(text, PyUnicode_FromString("}")) < 0) done = -1;
    Py_DECREF(names);
    return done;
}

/* origin(cls, name, table, op, where, key, offset, position, tx_id, header_names)
 *   -> cls(identity, change part's Avro bytes, headers), or None when the key holds a
 *   value canonical_key leaves to the JSON encoder (lineage.origin_of then does it). */
static PyObject *origin(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) || !PyTuple_Check(args[9]) ||
        PyTuple_GET_SIZE(args[9]) != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "origin(cls, name, table, op, where, key, offset, position, tx_id, "
                        "header_names)");
        return NULL;
    }
    PyObject *text = PyList_New(0);
    if (text == NULL) return NULL;
    PyObject *sep = PyUnicode_FromString("|"), *dot = PyUnicode_FromString(".");
    int ok = sep != NULL && dot != NULL && append(text, Py_NewRef(args[1])) == 0 &&
             append(text, Py_NewRef(dot)) == 0 && append(text, Py_NewRef(args[2])) == 0 &&
             append(text, Py_NewRef(sep)) == 0 && append(text, Py_NewRef(args[3])) == 0 &&
             append(text, Py_NewRef(sep)) == 0 && append(text, Py_NewRef(args[4])) == 0 &&
             append(text, Py_NewRef(sep)) == 0;
    int keyed = 1;
    if (ok && args[5] != Py_None) {
        keyed = PyDict_CheckExact(args[5]) ? canonical_key(args[5], text) : 0;
        ok = keyed >= 0;
    }
    PyObject *identity = NULL, *empty = NULL;
    if (ok && keyed == 1) {
        empty = PyUnicode_New(0, 0);
        identity = empty ? PyUnicode_Join(empty, text) : NULL;
        ok = identity != NULL;
    }
    Py_XDECREF(empty);
    Py_XDECREF(sep);
    Py_XDECREF(dot);
    Py_DECREF(text);
    if (!ok) { Py_XDECREF(identity); return NULL; }
    if (keyed == 0) Py_RETURN_NONE;
    PyObject *const part_args[6] = {
        args[6], args[7], args[8], PyTuple_GET_ITEM(args[9], 0), PyTuple_GET_ITEM(args[9], 1),
        PyTuple_GET_ITEM(args[9], 2),
    };
    PyObject *part = change_part(module, part_args, 6);
    PyObject *made = part ? ((PyTypeObject *)args[0])->tp_alloc((PyTypeObject *)args[0], 3) : NULL;
    if (made == NULL) { Py_XDECREF(part); Py_DECREF(identity); return NULL; }
    PyTuple_SET_ITEM(made, 0, identity);
    PyTuple_SET_ITEM(made, 1, Py_NewRef(PyTuple_GET_ITEM(part, 0)));
    PyTuple_SET_ITEM(made, 2, Py_NewRef(PyTuple_GET_ITEM(part, 1)));
    Py_DECREF(part);
    return made;
}

static PyMethodDef methods[] = {
    {"event_id", (PyCFunction)(void (*)(void))event_id, METH_FASTCALL,
     "event_id(namespace, name): str(uuid.uuid5(UUID(bytes=namespace), name))"},
    {"wire", (PyCFunction)(void (*)(void))wire, METH_FASTCALL,
     "wire(stamper, identity, contract, ordinal, change_avro, change_headers)"},
    {"change_part", (PyCFunction)(void (*)(void))change_part, METH_FASTCALL,
     "change_part(offset, position, tx_id, offset_header, position_header, tx_header)"},
    {"origin", (PyCFunction)(void (*)(void))origin, METH_FASTCALL,
     "origin(cls, name, table, op, where, key, offset, position, tx_id, header_names)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lineage",
    "Lineage on the wire, compiled (see translators/lineage.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__lineage(void) {
    PyObject *encoder = PyImport_ImportModule("json.encoder");
    if (encoder == NULL) return NULL;
    quote = PyObject_GetAttrString(encoder, "encode_basestring_ascii");
    Py_DECREF(encoder);
    if (quote == NULL) return NULL;
    return PyModule_Create(&module);
}
