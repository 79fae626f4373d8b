/* The translators' lineage in C: what translators/lineage.py's Stamper computes per
 * event and origin() per change, without the Python in between. Its own extension
 * module, bizevents.translators._lineage (built by contracts/avro_codegen/build.py with
 * the codec's), of the translators' floor: the codec's extension
 * (contracts/avro_codegen/_native.c) knows nothing of lineage.
 *
 *   event_id(namespace, name) -> str
 *       str(uuid.uuid5(UUID(bytes=namespace), name)): SHA-1 (OpenSSL's, linked in) of
 *       the namespace's 16 bytes and the name's UTF-8, version 5, RFC 4122 variant.
 *   wire(stamper, identity, contract, ordinal, change_avro, change_headers)
 *       -> (event id, lineage record's Avro bytes, headers list)
 *       stamper = (namespace, "|name|" as UTF-8, translator part's Avro bytes,
 *                  translator headers tuple, replay, event-id header's name,
 *                  replay header)
 *   change_part(offset, position, tx_id, offset header, position header, tx header)
 *       -> (change part's Avro bytes, headers tuple)
 *   origin(cls, name, table, op, where, key, offset, position, tx_id, header names)
 *       -> cls(the change's identity, change part, headers): lineage.origin_of's work
 *   origin_of(cls, event, table, header_names, pg_position)
 *       -> the same for a ChangeEvent, or None (a snapshot read, whose identity is its
 *       row's: lineage.origin_of's Python makes it)
 *
 * tests/translators/test_lineage_native.py holds each equal to the Python it replaces
 * (hypothesis), and translators/lineage.py falls back to that Python when the extension
 * is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
/* SHA1_Init and co., deprecated for EVP since OpenSSL 3.0: EVP's fetch brings libcrypto's
 * providers and threads (glibc 2.34's symbols) into a statically linked extension; the
 * plain SHA-1 brings its own code and the CPU probe only (glibc 2.14), so the wheel
 * carries no shared libcrypto and claims manylinux_2_17. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
#include <stdint.h>
#include <string.h>

#include "_text.h"

/* Attribute names read from C, interned once (at the module's start). */
static PyObject *ATTR_source, *ATTR_position, *ATTR_coordinates, *ATTR_offset, *ATTR_topic,
    *ATTR_partition, *ATTR_lsn, *ATTR_tx_id, *ATTR_qualified_table, *ATTR_name, *ATTR_op,
    *ATTR_key;

/* The upper-case hex text of value into out (at most 16 characters, no NUL); its length. */
static int hex_text(unsigned long long value, char *out) {
    static const char HEX[] = "0123456789ABCDEF";
    char reversed[16];
    int n = 0, length = 0;
    do {
        reversed[n++] = HEX[value & 15];
        value >>= 4;
    } while (value != 0);
    while (n > 0) out[length++] = reversed[--n];
    return length;
}

/* -- SHA-1 (libcrypto's, linked in) ------------------------------------------------ */

/* One context reused for every id: an id is hashed from start to end without any
 * Python running in between, under the GIL. */
static SHA_CTX SHA1_CTX;

static int crypto_failed(void) {
    PyErr_SetString(PyExc_RuntimeError, "libcrypto's SHA-1 failed");
    return -1;
}

static int sha1_update(const void *p, size_t n) {
    return SHA1_Update(&SHA1_CTX, p, n) == 1 ? 0 : crypto_failed();
}

/* The hash started with a namespace (a UUID's 16 bytes). */
static int namespace_of(PyObject *obj) {
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != 16) {
        PyErr_SetString(PyExc_TypeError, "the namespace is a UUID's 16 bytes");
        return -1;
    }
    if (SHA1_Init(&SHA1_CTX) != 1) return crypto_failed();
    return sha1_update(PyBytes_AS_STRING(obj), 16);
}

/* The UUIDv5 text of the finished hash: 36 characters into out. */
static int uuid5_text(char out[36]) {
    static const char HEX[] = "0123456789abcdef";
    unsigned char d[SHA_DIGEST_LENGTH];
    if (SHA1_Final(d, &SHA1_CTX) != 1) return crypto_failed();
    d[6] = (d[6] & 0x0F) | 0x50;  /* version 5 */
    d[8] = (d[8] & 0x3F) | 0x80;  /* RFC 4122 variant */
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = HEX[d[i] >> 4];
        out[o++] = HEX[d[i] & 0x0F];
    }
    return 0;
}

static const char *utf8_of(PyObject *obj, Py_ssize_t *size, const char *what) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(obj, size);
}

static PyObject *event_id(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "event_id(namespace, name)");
        return NULL;
    }
    Py_ssize_t size;
    const char *name = utf8_of(args[1], &size, "the name");
    if (name == NULL) return NULL;
    char text[36];
    if (namespace_of(args[0]) < 0 || sha1_update(name, (size_t)size) < 0 || uuid5_text(text) < 0)
        return NULL;
    return PyUnicode_FromStringAndSize(text, 36);
}

static PyObject *pair(PyObject *name, PyObject *value) {
    return PyTuple_Pack(2, name, value);
}

/* -- per event ------------------------------------------------------------------------ */

static PyObject *wire(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
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

    Py_ssize_t isize, nsize;
    const char *identity = utf8_of(args[1], &isize, "the identity");
    if (identity == NULL) return NULL;
    const char *contract = utf8_of(args[2], &nsize, "the contract");
    if (contract == NULL) return NULL;
    char number[24] = {'|'};
    int digits = 1 + decimal_text(ordinal, number + 1);
    char eid[36];
    if (namespace_of(PyTuple_GET_ITEM(stamper, 0)) < 0 || sha1_update(identity, (size_t)isize) < 0 ||
        sha1_update(PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name)) < 0 ||
        sha1_update(contract, (size_t)nsize) < 0 || sha1_update(number, (size_t)digits) < 0 ||
        uuid5_text(eid) < 0)
        return NULL;

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

static PyObject *change_part(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
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
    int ndigits = decimal_text(offset, digits);
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

/* A str's UTF-8; 0 when it has none (a lone surrogate: the Python then builds it). */
static int text_str(Text *t, PyObject *obj) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(obj, &n);
    if (p == NULL) { PyErr_Clear(); return 0; }
    return text_add(t, p, n) < 0 ? -1 : 1;
}

/* A str as JSON (json.encoder.encode_basestring_ascii writes it): printable ASCII
 * without a quote or a backslash is itself between quotes; anything else is quoted by
 * the encoder. */
static PyObject *quote;  /* json.encoder.encode_basestring_ascii */

static int text_json_str(Text *t, PyObject *obj) {
    if (PyUnicode_IS_ASCII(obj)) {
        const unsigned char *p = PyUnicode_1BYTE_DATA(obj);
        Py_ssize_t n = PyUnicode_GET_LENGTH(obj), i = 0;
        while (i < n && p[i] >= 0x20 && p[i] < 0x7F && p[i] != '"' && p[i] != '\\') i++;
        if (i == n) {
            return text_add(t, "\"", 1) < 0 || text_add(t, (const char *)p, n) < 0 ||
                           text_add(t, "\"", 1) < 0
                       ? -1
                       : 1;
        }
    }
    PyObject *quoted = PyObject_CallOneArg(quote, obj);
    if (quoted == NULL) return -1;
    int done = text_str(t, quoted);
    Py_DECREF(quoted);
    return done;
}

/* The canonical JSON of a key whose values are all exact ints and strs (what
 * lineage.canonical_key builds): sorted names, no spaces; 1 when done, 0 when a value
 * is of another type (the caller then lets the Python encoder do it), -1 on error. */
static int canonical_key(PyObject *key, Text *t) {
    PyObject *names;
    if (PyDict_GET_SIZE(key) == 1) {  /* the usual key: one column, nothing to sort */
        Py_ssize_t pos = 0;
        PyObject *name, *value;
        PyDict_Next(key, &pos, &name, &value);
        names = PyList_New(1);
        if (names != NULL) PyList_SET_ITEM(names, 0, Py_NewRef(name));
    } else {
        names = PyDict_Keys(key);
        if (names != NULL && PyList_Sort(names) < 0) Py_CLEAR(names);
    }
    if (names == NULL) return -1;
    int done = text_add(t, "{", 1) < 0 ? -1 : 1;
    for (Py_ssize_t i = 0; done == 1 && i < PyList_GET_SIZE(names); i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        PyObject *value = PyDict_GetItemWithError(key, name);
        if (value == NULL) { done = PyErr_Occurred() ? -1 : 0; break; }
        if (!PyUnicode_CheckExact(name) || !(PyLong_CheckExact(value) || PyUnicode_CheckExact(value))) {
            done = 0;
            break;
        }
        if (i > 0 && text_add(t, ",", 1) < 0) { done = -1; break; }
        if ((done = text_json_str(t, name)) != 1) break;
        if (text_add(t, ":", 1) < 0) { done = -1; break; }
        if (PyUnicode_CheckExact(value)) {
            done = text_json_str(t, value);
            continue;
        }
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) { done = -1; break; }
        if (overflow) {  /* beyond 64 bits: int's own repr */
            PyObject *repr = PyObject_Repr(value);
            done = repr == NULL ? -1 : text_str(t, repr);
            Py_XDECREF(repr);
        } else {
            char digits[24];
            int ndigits = decimal_text(number, digits);
            if (text_add(t, digits, ndigits) < 0) done = -1;
        }
    }
    if (done == 1 && text_add(t, "}", 1) < 0) done = -1;
    Py_DECREF(names);
    return done;
}

/* origin(cls, name, table, op, where, key, offset, position, tx_id, header_names)
 *   -> cls(identity, change part's Avro bytes, headers), or None when the key holds a
 *   value canonical_key leaves to the JSON encoder (lineage.origin_of then does it). */
static PyObject *origin(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) || !PyTuple_Check(args[9]) ||
        PyTuple_GET_SIZE(args[9]) != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "origin(cls, name, table, op, where, key, offset, position, tx_id, "
                        "header_names)");
        return NULL;
    }
    /* name.table|op|where|key */
    Text text;
    text_init(&text);
    int keyed = 1;
    PyObject *const parts[4] = {args[1], args[2], args[3], args[4]};
    static const char seps[4] = {'.', '|', '|', '|'};
    for (int i = 0; keyed == 1 && i < 4; i++) {
        if (!PyUnicode_Check(parts[i])) {
            text_free(&text);
            PyErr_SetString(PyExc_TypeError, "origin: the name, table, op and where are str");
            return NULL;
        }
        keyed = text_str(&text, parts[i]);
        if (keyed == 1 && text_add(&text, &seps[i], 1) < 0) keyed = -1;
    }
    if (keyed == 1 && args[5] != Py_None)
        keyed = PyDict_CheckExact(args[5]) ? canonical_key(args[5], &text) : 0;
    PyObject *identity = keyed == 1 ? PyUnicode_DecodeUTF8(text.data, text.size, NULL) : NULL;
    text_free(&text);
    if (keyed < 0 || (keyed == 1 && identity == NULL)) return NULL;
    if (keyed == 0) Py_RETURN_NONE;
    PyObject *const part_args[6] = {
        args[6], args[7], args[8], PyTuple_GET_ITEM(args[9], 0), PyTuple_GET_ITEM(args[9], 1),
        PyTuple_GET_ITEM(args[9], 2),
    };
    PyObject *part = change_part(NULL, part_args, 6);
    PyObject *made = part ? ((PyTypeObject *)args[0])->tp_alloc((PyTypeObject *)args[0], 3) : NULL;
    if (made == NULL) { Py_XDECREF(part); Py_DECREF(identity); return NULL; }
    PyTuple_SET_ITEM(made, 0, identity);
    PyTuple_SET_ITEM(made, 1, Py_NewRef(PyTuple_GET_ITEM(part, 0)));
    PyTuple_SET_ITEM(made, 2, Py_NewRef(PyTuple_GET_ITEM(part, 1)));
    Py_DECREF(part);
    return made;
}

/* origin_of(cls, event, table, header_names, pg_position)
 *   -> what lineage.origin_of gives for a ChangeEvent, read from the event itself: its
 *   source's name, op, key and coordinates, and a position that is None or of the class
 *   pg_position (its text as PgPosition.__str__ writes it for an LSN of 0 to 2**64 - 1,
 *   its tx_id as Source.tx_id gives it); table None: the source's qualified_table.
 *   None for anything else (another position, a key left to the JSON encoder, a snapshot
 *   read): the Python then does it. */
static PyObject *origin_of(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "origin_of(cls, event, table, header_names, pg_position)");
        return NULL;
    }
    PyObject *event = args[1];
    PyObject *source = NULL, *position = NULL, *coordinates = NULL, *offset = NULL;
    PyObject *text = NULL, *tx_text = NULL, *where = NULL, *table = NULL, *name = NULL;
    PyObject *op = NULL, *key = NULL, *made = NULL;
    if ((source = PyObject_GetAttr(event, ATTR_source)) == NULL ||
        (position = PyObject_GetAttr(source, ATTR_position)) == NULL ||
        (coordinates = PyObject_GetAttr(event, ATTR_coordinates)) == NULL ||
        (offset = PyObject_GetAttr(coordinates, ATTR_offset)) == NULL)
        goto done;
    if (position == Py_None) {
        PyObject *topic = PyObject_GetAttr(coordinates, ATTR_topic);
        PyObject *partition = topic ? PyObject_GetAttr(coordinates, ATTR_partition) : NULL;
        if (partition != NULL) where = PyUnicode_FromFormat("%S/%S/%S", topic, partition, offset);
        Py_XDECREF(topic);
        Py_XDECREF(partition);
        if (where == NULL || (text = PyUnicode_New(0, 0)) == NULL) goto done;
        tx_text = Py_NewRef(Py_None);
    } else if (Py_IS_TYPE(position, (PyTypeObject *)args[4])) {
        PyObject *lsn = PyObject_GetAttr(position, ATTR_lsn);
        if (lsn == NULL) goto done;
        if (lsn == Py_None) {
            text = PyUnicode_FromString("lsn:?");
        } else {
            unsigned long long value = PyLong_Check(lsn) ? PyLong_AsUnsignedLongLong(lsn) : 0;
            if (!PyLong_Check(lsn) || PyErr_Occurred()) {  /* not 0 .. 2**64 - 1: Python's */
                PyErr_Clear();
                Py_DECREF(lsn);
                made = Py_NewRef(Py_None);
                goto done;
            }
            char buffer[40];
            int length = hex_text(value >> 32, buffer);
            buffer[length++] = '/';
            length += hex_text(value & 0xFFFFFFFFULL, buffer + length);
            text = PyUnicode_FromStringAndSize(buffer, length);
        }
        Py_DECREF(lsn);
        if (text == NULL) goto done;
        PyObject *tx = PyObject_GetAttr(position, ATTR_tx_id);
        if (tx == NULL) goto done;
        tx_text = tx == Py_None ? Py_NewRef(Py_None) : PyObject_Str(tx);
        Py_DECREF(tx);
        if (tx_text == NULL) goto done;
        where = Py_NewRef(text);
    } else {
        made = Py_NewRef(Py_None);
        goto done;
    }
    table = args[2] == Py_None ? PyObject_GetAttr(source, ATTR_qualified_table)
                               : Py_NewRef(args[2]);
    if (table == NULL || (name = PyObject_GetAttr(source, ATTR_name)) == NULL ||
        (op = PyObject_GetAttr(event, ATTR_op)) == NULL ||
        (key = PyObject_GetAttr(event, ATTR_key)) == NULL)
        goto done;
    if (PyUnicode_Check(op) && PyUnicode_CompareWithASCIIString(op, "r") == 0) {
        made = Py_NewRef(Py_None);  /* a snapshot read: its identity is its row's (Python) */
        goto done;
    }
    PyObject *number = offset;
    PyObject *minus_one = NULL;
    if (offset == Py_None && (number = minus_one = PyLong_FromLong(-1)) == NULL) goto done;
    PyObject *const origin_args[10] = {
        args[0], name, table, op, where, key, number, text, tx_text, args[3],
    };
    made = origin(NULL, origin_args, 10);
    Py_XDECREF(minus_one);
done:
    Py_XDECREF(source);
    Py_XDECREF(position);
    Py_XDECREF(coordinates);
    Py_XDECREF(offset);
    Py_XDECREF(text);
    Py_XDECREF(tx_text);
    Py_XDECREF(where);
    Py_XDECREF(table);
    Py_XDECREF(name);
    Py_XDECREF(op);
    Py_XDECREF(key);
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
    {"origin_of", (PyCFunction)(void (*)(void))origin_of, METH_FASTCALL,
     "origin_of(cls, event, table, header_names, pg_position) -> cls(...) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_lineage",
    .m_doc = "The translators' lineage in C (see translators/lineage.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__lineage(void) {
    PyObject *encoder = PyImport_ImportModule("json.encoder");
    if (encoder == NULL) return NULL;
    quote = PyObject_GetAttrString(encoder, "encode_basestring_ascii");
    Py_DECREF(encoder);
    if (quote == NULL) return NULL;
    struct { PyObject **slot; const char *name; } attrs[] = {
        {&ATTR_source, "source"},
        {&ATTR_position, "position"},
        {&ATTR_coordinates, "coordinates"},
        {&ATTR_offset, "offset"},
        {&ATTR_topic, "topic"},
        {&ATTR_partition, "partition"},
        {&ATTR_lsn, "lsn"},
        {&ATTR_tx_id, "tx_id"},
        {&ATTR_qualified_table, "qualified_table"},
        {&ATTR_name, "name"},
        {&ATTR_op, "op"},
        {&ATTR_key, "key"},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        if ((*attrs[i].slot = PyUnicode_InternFromString(attrs[i].name)) == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
