/* The project's compiled Avro reader: one small interpreter of a read plan.
 *
 * contracts/avro_codegen/native.py turns a writer schema (with its projection and
 * column conversions) into a plan of nested tuples; Program(plan) parses it once into
 * the nodes below, and program(buf, pos) reads one datum, returning (datum, pos after
 * it), exactly what the generated Python reader (reader.py) returns for the same plan.
 * Skipped fields are stepped over without building objects. Any bad byte raises
 * (ValueError, EOFError, IndexError, UnicodeDecodeError): callers then let fastavro read
 * the record, and its verdict stands, as they do for the generated reader (but for
 * Refused, which stands).
 *
 * Slots(cls, names) makes the objects the builders return; unchanged(...) is a topic's
 * changes gate; WritePlan(plan) writes a contract's instance (or a record given as a
 * tuple of its fields: the replay's file records). The codec's floor (contracts) only:
 * the translators' lineage has its own extension (translators/_lineage.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>

#include "_text.h"

enum kind {
    K_NULL, K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_STRING, K_BYTES, K_FIXED,
    K_ENUM, K_RECORD, K_UNION, K_ARRAY, K_MAP, K_CALL, K_SKIP, K_DECIMAL, K_GATE
};

typedef struct Node {
    int kind;
    Py_ssize_t n;            /* fixed: size; record, union: children */
    struct Node **children;  /* record fields, union branches; array, map, call, skip: [0] */
    PyObject **names;        /* record: a field's name (NULL: skipped) */
    PyObject **converters;   /* record: a field's conversion (NULL: none) */
    PyObject *obj;           /* enum: the symbols (tuple); call: the function; record: its
                                builder (called with the kept fields' values), or NULL */
    PyObject *args;          /* call: extra arguments after the value (tuple), or NULL;
                                decimal: (Decimal, the Python reader of the bytes);
                                gate: its layout (see read_gate) */
    long long precision, scale;  /* decimal */
    struct GateLayout *gate;     /* gate: its layout, parsed (see read_gate) */
    int zero_width;          /* a datum of no bytes at all (null, fixed(0), a record of such) */
} Node;

/* gen.Refused: bytes the readers refuse outright, where fastavro would build a list of
 * more items than the bytes could ever hold (the decoder's verdict, not fastavro's). */
static PyObject *Refused;

#define MAX_GATED 32

/* A list of field indices, as a gate compares them. */
typedef struct {
    Py_ssize_t n;
    Py_ssize_t at[MAX_GATED];
} Indices;

typedef struct GateLayout {
    Py_ssize_t before, after, source;
    Indices columns, checked, source_checked;
} GateLayout;

typedef struct {
    const unsigned char *buf;
    Py_ssize_t len;
    Py_ssize_t pos;
    Py_ssize_t spare;  /* items of no width still allowed (see block_count) */
} Cursor;

/* Items of no width a datum may hold beyond one per byte of its buffer (gen.SPARE_ITEMS). */
#define SPARE_ITEMS 65536

/* Attribute names read from C, interned once (at the module's start). */
static PyObject *ATTR_tzinfo, *ATTR_read, *ATTR_dict, *ATTR_value, *ATTR_value_;
/* enum.Enum's value property: a member whose type has it gives its _value_ (read directly:
 * the property is Python code, two calls per enum field written). */
static PyObject *ENUM_VALUE;

static const char *KINDS[] = {
    "null", "boolean", "int", "long", "float", "double", "string", "bytes", "fixed",
    "enum", "record", "union", "array", "map", "call", "skip", "decimal", "gate", NULL
};

/* -- plan -> nodes ------------------------------------------------------------------ */

static void node_free(Node *node) {
    if (node == NULL) return;
    if (node->children != NULL) {
        Py_ssize_t count = (node->kind == K_RECORD || node->kind == K_UNION) ? node->n : 1;
        for (Py_ssize_t i = 0; i < count; i++) node_free(node->children[i]);
        PyMem_Free(node->children);
    }
    if (node->names != NULL) {
        for (Py_ssize_t i = 0; i < node->n; i++) Py_XDECREF(node->names[i]);
        PyMem_Free(node->names);
    }
    if (node->converters != NULL) {
        for (Py_ssize_t i = 0; i < node->n; i++) Py_XDECREF(node->converters[i]);
        PyMem_Free(node->converters);
    }
    Py_XDECREF(node->obj);
    Py_XDECREF(node->args);
    PyMem_Free(node->gate);
    PyMem_Free(node);
}

/* A tuple of at most MAX_GATED field indices, into `out`. */
static int indices_of(PyObject *tuple, Indices *out) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) > MAX_GATED) {
        PyErr_SetString(PyExc_TypeError, "a gate's field indices are a tuple of at most 32");
        return -1;
    }
    out->n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t k = 0; k < out->n; k++) {
        out->at[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, k));
        if (out->at[k] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a negative field index");
            return -1;
        }
    }
    return 0;
}

static Node *node_new(PyObject *plan, int depth);

static int child_of(Node *node, PyObject *plan, Py_ssize_t at, int depth) {
    node->children = PyMem_Calloc(1, sizeof(Node *));
    if (node->children == NULL) { PyErr_NoMemory(); return -1; }
    node->children[0] = node_new(PyTuple_GET_ITEM(plan, at), depth + 1);
    return node->children[0] == NULL ? -1 : 0;
}

static Node *node_new(PyObject *plan, int depth) {
    if (depth > 64) {
        PyErr_SetString(PyExc_ValueError, "a read plan nested more than 64 deep");
        return NULL;
    }
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) < 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(plan, 0))) {
        PyErr_SetString(PyExc_TypeError, "a read plan node is a tuple (kind, ...)");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(plan, 0));
    if (name == NULL) return NULL;
    int kind = -1;
    for (int i = 0; KINDS[i] != NULL; i++) {
        if (strcmp(KINDS[i], name) == 0) { kind = i; break; }
    }
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError, "unknown read plan node %R", PyTuple_GET_ITEM(plan, 0));
        return NULL;
    }
    Node *node = PyMem_Calloc(1, sizeof(Node));
    if (node == NULL) { PyErr_NoMemory(); return NULL; }
    node->kind = kind;
    Py_ssize_t size = PyTuple_GET_SIZE(plan);
    switch (kind) {
    case K_FIXED:
        if (size != 2 || (node->n = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 1))) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fixed needs a size");
            goto fail;
        }
        break;
    case K_ENUM:
        if (size != 2 || !PyTuple_Check(PyTuple_GET_ITEM(plan, 1))) {
            PyErr_SetString(PyExc_TypeError, "enum needs a tuple of symbols");
            goto fail;
        }
        node->obj = Py_NewRef(PyTuple_GET_ITEM(plan, 1));
        break;
    case K_RECORD: {
        PyObject *fields = (size == 2 || size == 3) ? PyTuple_GET_ITEM(plan, 1) : NULL;
        if (fields == NULL || !PyTuple_Check(fields)) {
            PyErr_SetString(PyExc_TypeError, "record needs a tuple of fields");
            goto fail;
        }
        if (size == 3 && PyTuple_GET_ITEM(plan, 2) != Py_None) {
            if (!PyCallable_Check(PyTuple_GET_ITEM(plan, 2))) {
                PyErr_SetString(PyExc_TypeError, "a record's builder is callable");
                goto fail;
            }
            node->obj = Py_NewRef(PyTuple_GET_ITEM(plan, 2));
        }
        node->n = PyTuple_GET_SIZE(fields);
        node->children = PyMem_Calloc(node->n ? node->n : 1, sizeof(Node *));
        node->names = PyMem_Calloc(node->n ? node->n : 1, sizeof(PyObject *));
        node->converters = PyMem_Calloc(node->n ? node->n : 1, sizeof(PyObject *));
        if (!node->children || !node->names || !node->converters) { PyErr_NoMemory(); goto fail; }
        for (Py_ssize_t i = 0; i < node->n; i++) {
            PyObject *field = PyTuple_GET_ITEM(fields, i);
            if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 3) {
                PyErr_SetString(PyExc_TypeError, "a record field is (name or None, node, conversion or None)");
                goto fail;
            }
            PyObject *fname = PyTuple_GET_ITEM(field, 0);
            PyObject *convert = PyTuple_GET_ITEM(field, 2);
            if (fname != Py_None) {
                if (!PyUnicode_Check(fname)) {
                    PyErr_SetString(PyExc_TypeError, "a field name is a str");
                    goto fail;
                }
                Py_INCREF(fname);
                PyUnicode_InternInPlace(&fname);
                node->names[i] = fname;
            }
            if (PyTuple_CheckExact(convert) && PyTuple_GET_SIZE(convert) != 4) {
                PyErr_SetString(PyExc_TypeError, "a conversion tuple has 4 items");
                goto fail;
            }
            if (convert != Py_None) node->converters[i] = Py_NewRef(convert);
            node->children[i] = node_new(PyTuple_GET_ITEM(field, 1), depth + 1);
            if (node->children[i] == NULL) goto fail;
        }
        break;
    }
    case K_UNION: {
        PyObject *branches = size == 2 ? PyTuple_GET_ITEM(plan, 1) : NULL;
        if (branches == NULL || !PyTuple_Check(branches)) {
            PyErr_SetString(PyExc_TypeError, "union needs a tuple of branches");
            goto fail;
        }
        node->n = PyTuple_GET_SIZE(branches);
        node->children = PyMem_Calloc(node->n ? node->n : 1, sizeof(Node *));
        if (!node->children) { PyErr_NoMemory(); goto fail; }
        for (Py_ssize_t i = 0; i < node->n; i++) {
            node->children[i] = node_new(PyTuple_GET_ITEM(branches, i), depth + 1);
            if (node->children[i] == NULL) goto fail;
        }
        break;
    }
    case K_ARRAY: case K_MAP: case K_SKIP:
        if (size != 2) { PyErr_SetString(PyExc_TypeError, "array, map and skip need one node"); goto fail; }
        if (child_of(node, plan, 1, depth) < 0) goto fail;
        break;
    case K_DECIMAL:
        /* ("decimal", bytes or fixed node, precision, scale, Decimal, Python reader) */
        if (size != 6 || !PyCallable_Check(PyTuple_GET_ITEM(plan, 4)) ||
            !PyCallable_Check(PyTuple_GET_ITEM(plan, 5))) {
            PyErr_SetString(PyExc_TypeError,
                            "decimal is (\"decimal\", node, precision, scale, Decimal, reader)");
            goto fail;
        }
        node->precision = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 2));
        node->scale = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 3));
        if (PyErr_Occurred()) goto fail;
        if (child_of(node, plan, 1, depth) < 0) goto fail;
        if (node->children[0]->kind != K_BYTES && node->children[0]->kind != K_FIXED) {
            PyErr_SetString(PyExc_TypeError, "a decimal reads bytes or a fixed");
            goto fail;
        }
        node->args = PyTuple_Pack(2, PyTuple_GET_ITEM(plan, 4), PyTuple_GET_ITEM(plan, 5));
        if (node->args == NULL) goto fail;
        break;
    case K_GATE:
        /* ("gate", envelope record node, layout, check): see read_gate */
        if (size != 4 || !PyTuple_Check(PyTuple_GET_ITEM(plan, 2)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(plan, 2)) != 8 ||
            !PyCallable_Check(PyTuple_GET_ITEM(plan, 3))) {
            PyErr_SetString(PyExc_TypeError, "gate is (\"gate\", envelope node, layout, check)");
            goto fail;
        }
        node->obj = Py_NewRef(PyTuple_GET_ITEM(plan, 3));
        if (child_of(node, plan, 1, depth) < 0) goto fail;
        if (node->children[0]->kind != K_RECORD) {
            PyErr_SetString(PyExc_TypeError, "a gate reads a record");
            goto fail;
        }
        {
            PyObject *layout = PyTuple_GET_ITEM(plan, 2);
            GateLayout *gate = node->gate = PyMem_Calloc(1, sizeof(GateLayout));
            if (gate == NULL) { PyErr_NoMemory(); goto fail; }
            gate->before = PyLong_AsSsize_t(PyTuple_GET_ITEM(layout, 0));
            gate->after = PyLong_AsSsize_t(PyTuple_GET_ITEM(layout, 1));
            gate->source = PyLong_AsSsize_t(PyTuple_GET_ITEM(layout, 5));
            if (PyErr_Occurred() ||
                indices_of(PyTuple_GET_ITEM(layout, 2), &gate->columns) < 0 ||
                indices_of(PyTuple_GET_ITEM(layout, 3), &gate->checked) < 0 ||
                indices_of(PyTuple_GET_ITEM(layout, 6), &gate->source_checked) < 0)
                goto fail;
            for (int k = 4; k <= 7; k += 3) {  /* the expected bytes, one per checked field */
                PyObject *want = PyTuple_GET_ITEM(layout, k);
                Py_ssize_t count = (k == 4 ? gate->checked : gate->source_checked).n;
                int ok = PyTuple_Check(want) && PyTuple_GET_SIZE(want) == count;
                for (Py_ssize_t j = 0; ok && j < count; j++)
                    ok = PyBytes_Check(PyTuple_GET_ITEM(want, j));
                if (!ok) {
                    PyErr_SetString(PyExc_TypeError, "a gate expects bytes for each field it checks");
                    goto fail;
                }
            }
            node->args = Py_NewRef(layout);
        }
        break;
    case K_CALL:
        if (size != 4 || !PyCallable_Check(PyTuple_GET_ITEM(plan, 2))) {
            PyErr_SetString(PyExc_TypeError, "call is (\"call\", node, function, extra arguments or None)");
            goto fail;
        }
        if (child_of(node, plan, 1, depth) < 0) goto fail;
        node->obj = Py_NewRef(PyTuple_GET_ITEM(plan, 2));
        if (PyTuple_GET_ITEM(plan, 3) != Py_None) {
            if (!PyTuple_Check(PyTuple_GET_ITEM(plan, 3))) {
                PyErr_SetString(PyExc_TypeError, "a call's extra arguments are a tuple");
                goto fail;
            }
            node->args = Py_NewRef(PyTuple_GET_ITEM(plan, 3));
        }
        break;
    default:
        if (size != 1) { PyErr_Format(PyExc_TypeError, "%s takes no arguments", name); goto fail; }
    }
    switch (kind) {
    case K_NULL: node->zero_width = 1; break;
    case K_FIXED: node->zero_width = node->n == 0; break;
    case K_RECORD:
        node->zero_width = 1;
        for (Py_ssize_t i = 0; i < node->n; i++) node->zero_width &= node->children[i]->zero_width;
        break;
    case K_CALL: case K_SKIP: case K_DECIMAL: node->zero_width = node->children[0]->zero_width; break;
    default: node->zero_width = 0;
    }
    return node;
fail:
    node_free(node);
    return NULL;
}

/* -- reading ------------------------------------------------------------------------- */

static int eof(void) {
    PyErr_SetString(PyExc_EOFError, "the datum runs past the end of the bytes");
    return -1;
}

/* Avro's zig-zag varint, as fastavro reads it: at most 10 bytes, wrapping at 64 bits. */
static int read_long(Cursor *c, long long *out) {
    unsigned long long n = 0;
    for (int shift = 0;; shift += 7) {
        if (shift > 63) {
            PyErr_SetString(PyExc_ValueError, "a varint longer than 10 bytes");
            return -1;
        }
        if (c->pos >= c->len) return eof();
        unsigned char b = c->buf[c->pos++];
        n |= (unsigned long long)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
    }
    *out = (long long)(n >> 1) ^ -(long long)(n & 1);
    return 0;
}

static int read_size(Cursor *c, Py_ssize_t *out) {
    long long n;
    if (read_long(c, &n) < 0) return -1;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "a negative length"); return -1; }
    if (n > c->len - c->pos) return eof();
    *out = (Py_ssize_t)n;
    return 0;
}

/* The item count of an array or map block into *n: 1, 0 at the end (a count of zero), -1
 * on error. A negative count is followed by the block's byte size, which is read and not
 * trusted: the items are read (or stepped over) one by one, as fastavro reads them, so a
 * projected read and a full one agree. A count of -2**63 (no positive counterpart) holds
 * no items, as fastavro reads it. A count the bytes left cannot hold is refused before
 * any item is read: an EOFError where an item takes a byte at least. Items that take no
 * bytes (null, fixed(0), empty records) are counted against the cursor's spare: a datum
 * holds at most one per byte of its buffer and SPARE_ITEMS more; beyond that, Refused
 * (six bytes could ask for 2**62 of them, which fastavro builds one by one). */
static int block_count(const Node *node, Cursor *c, long long *n) {
    if (read_long(c, n) < 0) return -1;
    if (*n == 0) return 0;
    if (*n < 0) {
        long long size;
        *n = *n == LLONG_MIN ? 0 : -*n;
        if (read_long(c, &size) < 0) return -1;
    }
    if (node->kind == K_ARRAY && node->children[0]->zero_width) {
        if (*n > c->spare) {
            PyErr_Format(Refused, "an array block of %lld items of no width, more than %zd",
                         *n, c->spare);
            return -1;
        }
        c->spare -= (Py_ssize_t)*n;
    } else if (*n > c->len - c->pos) {
        return eof();
    }
    return 1;
}

static PyObject *read_node(const Node *node, Cursor *c);

static int skip_node(const Node *node, Cursor *c) {
    long long n;
    Py_ssize_t size;
    switch (node->kind) {
    case K_NULL: return 0;
    case K_BOOL:
        if (c->pos >= c->len) return eof();
        c->pos++;
        return 0;
    case K_INT: case K_LONG: case K_ENUM:
        /* the value is not needed: step over the varint's continuation bytes */
        while (c->pos < c->len && c->buf[c->pos] > 127) c->pos++;
        if (c->pos >= c->len) return eof();
        c->pos++;
        return 0;
    case K_FLOAT: case K_DOUBLE: {
        Py_ssize_t width = node->kind == K_FLOAT ? 4 : 8;
        if (c->len - c->pos < width) return eof();
        c->pos += width;
        return 0;
    }
    case K_STRING: case K_BYTES:
        if (read_size(c, &size) < 0) return -1;
        c->pos += size;
        return 0;
    case K_FIXED:
        if (c->len - c->pos < node->n) return eof();
        c->pos += node->n;
        return 0;
    case K_RECORD:
        for (Py_ssize_t i = 0; i < node->n; i++)
            if (skip_node(node->children[i], c) < 0) return -1;
        return 0;
    case K_UNION:
        if (read_long(c, &n) < 0) return -1;
        if (n < 0) n += node->n;
        if (n < 0 || n >= node->n) {
            PyErr_SetString(PyExc_IndexError, "union branch out of range");
            return -1;
        }
        return skip_node(node->children[n], c);
    case K_ARRAY: case K_MAP:
        for (;;) {
            int more = block_count(node, c, &n);
            if (more <= 0) return more;
            for (long long i = 0; i < n; i++) {
                if (node->kind == K_MAP) {
                    if (read_size(c, &size) < 0) return -1;
                    c->pos += size;
                }
                if (skip_node(node->children[0], c) < 0) return -1;
            }
        }
    case K_CALL: case K_SKIP: case K_DECIMAL: case K_GATE:
        return skip_node(node->children[0], c);
    }
    PyErr_SetString(PyExc_SystemError, "unknown node");
    return -1;
}

#define MAX_BUILT 64

/* A field's conversion of value (a new reference, stolen): a callable is called; a
 * tuple (marker, unavailable, then, zoned) is done here (see native_conversion in
 * contracts/logical/decode.py): a value equal to marker (unless None) reads as
 * unavailable, any other is then(value) (unless then is None; a frozenset then: the
 * value as it is, if it is one of its strs), whose result must have a zone when zoned
 * is True. */
static PyObject *convert(PyObject *conversion, PyObject *value) {
    PyObject *out;
    if (!PyTuple_CheckExact(conversion)) {
        out = PyObject_CallOneArg(conversion, value);
        Py_DECREF(value);
        return out;
    }
    PyObject *marker = PyTuple_GET_ITEM(conversion, 0), *then = PyTuple_GET_ITEM(conversion, 2);
    if (marker != Py_None) {
        int equal = PyObject_RichCompareBool(value, marker, Py_EQ);
        if (equal != 0) {
            Py_DECREF(value);
            return equal < 0 ? NULL : Py_NewRef(PyTuple_GET_ITEM(conversion, 1));
        }
    }
    if (then == Py_None) return value;
    if (PyFrozenSet_CheckExact(then)) {
        int member = PyUnicode_Check(value) ? PySet_Contains(then, value) : 0;
        if (member == 1) return value;
        Py_DECREF(value);
        if (member == 0) PyErr_SetString(PyExc_ValueError, "not one of the enum's labels");
        return NULL;
    }
    out = PyObject_CallOneArg(then, value);
    Py_DECREF(value);
    if (out == NULL || PyTuple_GET_ITEM(conversion, 3) != Py_True) return out;
    PyObject *zone = PyObject_GetAttr(out, ATTR_tzinfo);
    if (zone == NULL || zone == Py_None) {
        Py_XDECREF(zone);
        Py_DECREF(out);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a zoned value without a zone");
        return NULL;
    }
    Py_DECREF(zone);
    return out;
}

/* A decimal's unscaled bytes (big-endian two's complement) as a Decimal: what
 * _decimal_reader in native.py gives, context.create_decimal(unscaled).scaleb(-scale)
 * with the schema's precision as the context's. For up to 8 bytes whose value has at
 * most `precision` digits (nothing to round) that is the Decimal of the exact text
 * "<unscaled>E-<scale>"; anything else is handed to the Python reader. */
static PyObject *read_decimal(const Node *node, const unsigned char *p, Py_ssize_t size) {
    PyObject *type = PyTuple_GET_ITEM(node->args, 0), *reader = PyTuple_GET_ITEM(node->args, 1);
    if (size <= 8 && node->scale >= 0 && node->precision >= 1) {
        uint64_t bits = (size > 0 && (p[0] & 0x80)) ? ~(uint64_t)0 : 0;
        for (Py_ssize_t i = 0; i < size; i++) bits = (bits << 8) | p[i];
        int64_t unscaled = (int64_t)bits;
        uint64_t magnitude = unscaled < 0 ? (uint64_t)0 - bits : bits;
        int digits = 1;
        for (uint64_t rest = magnitude / 10; rest != 0; rest /= 10) digits++;
        if (digits <= node->precision) {
            char text[48];
            int length = decimal_text((long long)unscaled, text);
            text[length++] = 'E';
            text[length++] = '-';
            length += decimal_text((long long)node->scale, text + length);
            PyObject *str = PyUnicode_FromStringAndSize(text, length);
            if (str == NULL) return NULL;
            PyObject *out = PyObject_CallOneArg(type, str);
            Py_DECREF(str);
            return out;
        }
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)p, size);
    if (raw == NULL) return NULL;
    PyObject *out = PyObject_CallOneArg(reader, raw);
    Py_DECREF(raw);
    return out;
}

/* -- the unchanged-update gate ------------------------------------------------------ */

typedef struct {
    const unsigned char *at;
    Py_ssize_t size;
} Span;

/* Where the fields `wanted` of a record lie: steps over the record, noting them. */
static int record_spans(const Node *record, Cursor *c, const Indices *wanted, Span *spans) {
    for (Py_ssize_t i = 0; i < record->n; i++) {
        Py_ssize_t start = c->pos;
        if (skip_node(record->children[i], c) < 0) return -1;
        for (Py_ssize_t k = 0; k < wanted->n; k++) {
            if (wanted->at[k] == i) {
                spans[k].at = c->buf + start;
                spans[k].size = c->pos - start;
            }
        }
    }
    return 0;
}

/* Whether the spans hold exactly the expected bytes (a tuple of bytes, one per span). */
static int spans_hold(const Span *spans, PyObject *expected) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(expected); k++) {
        PyObject *want = PyTuple_GET_ITEM(expected, k);
        if (spans[k].at == NULL || spans[k].size != PyBytes_GET_SIZE(want) ||
            memcmp(spans[k].at, PyBytes_AS_STRING(want), (size_t)spans[k].size) != 0)
            return 0;
    }
    return 1;
}

/* The gate of an update that changes none of a translator's declared columns
 * (bizevents.translators.api, ``changes``). Its node holds the decoder's own read plan of
 * the envelope, the layout (before, after, columns, checked, expected, source, source
 * checked, source expected) and check, the decoder's checks of what its plan read. Its
 * bytes are walked first, building nothing: the fields `before` and `after` (unions of
 * null and the row record) must both be rows whose fields `columns` (indices) hold the
 * same bytes, its fields `checked` hold the bytes `expected` (op: "u") and the fields
 * `source checked` of its source block (field `source`) hold `source expected` (its
 * schema or db, its table). Equal bytes are equal values, so such an update changes none
 * of them. False as soon as one does not hold: the decoder reads the record. Where all
 * hold, the envelope is then read as the decoder reads it (its projection, conversions
 * and builders) and checked, so that nothing the decoder refuses is called unchanged:
 * True. A datum that does not read or check raises: the decoder then reads it and gives
 * the verdict. */
static PyObject *read_gate(const Node *node, Cursor *c) {
    const GateLayout *gate = node->gate;
    const Node *envelope = node->children[0];
    Py_ssize_t start = c->pos;
    Span rows[2][MAX_GATED], fields[MAX_GATED], source_fields[MAX_GATED];
    memset(rows, 0, sizeof rows);
    memset(fields, 0, sizeof fields);
    memset(source_fields, 0, sizeof source_fields);
    int present = 0;
    for (Py_ssize_t i = 0; i < envelope->n; i++) {
        const Node *field = envelope->children[i];
        Py_ssize_t at = c->pos;
        int row = i == gate->before ? 0 : i == gate->after ? 1 : -1;
        if (row >= 0 && field->kind == K_UNION) {
            long long branch;
            if (read_long(c, &branch) < 0) return NULL;
            if (branch < 0) branch += field->n;
            if (branch < 0 || branch >= field->n) {
                PyErr_SetString(PyExc_IndexError, "union branch out of range");
                return NULL;
            }
            const Node *chosen = field->children[branch];
            if (chosen->kind != K_RECORD) Py_RETURN_FALSE;  /* no such row: not gated */
            if (record_spans(chosen, c, &gate->columns, rows[row]) < 0) return NULL;
            if (++present == 2) {  /* both rows read: a change ends it here */
                for (Py_ssize_t k = 0; k < gate->columns.n; k++) {
                    if (rows[0][k].at == NULL || rows[0][k].size != rows[1][k].size ||
                        memcmp(rows[0][k].at, rows[1][k].at, (size_t)rows[0][k].size) != 0)
                        Py_RETURN_FALSE;
                }
            }
        } else if (i == gate->source && field->kind == K_RECORD) {
            if (record_spans(field, c, &gate->source_checked, source_fields) < 0) return NULL;
        } else if (skip_node(field, c) < 0) {
            return NULL;
        }
        for (Py_ssize_t k = 0; k < gate->checked.n; k++) {
            if (gate->checked.at[k] == i) {
                fields[k].at = c->buf + at;
                fields[k].size = c->pos - at;
            }
        }
    }
    if (present != 2 || !spans_hold(fields, PyTuple_GET_ITEM(node->args, 4)) ||
        !spans_hold(source_fields, PyTuple_GET_ITEM(node->args, 7)))
        Py_RETURN_FALSE;
    /* unchanged by its bytes: now read as the decoder reads it, and checked */
    Cursor again = {c->buf, c->pos, start, c->len + SPARE_ITEMS};
    PyObject *datum = read_node(envelope, &again);
    if (datum == NULL) return NULL;
    PyObject *checked = PyObject_CallOneArg(node->obj, datum);
    Py_DECREF(datum);
    if (checked == NULL) return NULL;
    Py_DECREF(checked);
    Py_RETURN_TRUE;
}

/* A record handed to its builder: builder(*kept values), no dict in between. */
static PyObject *build_record(const Node *node, Cursor *c) {
    PyObject *values[MAX_BUILT];
    Py_ssize_t n = 0;
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < node->n; i++) {
        if (node->names[i] == NULL) {
            if (skip_node(node->children[i], c) < 0) goto done;
            continue;
        }
        if (n == MAX_BUILT) {
            PyErr_SetString(PyExc_ValueError, "a built record keeps at most 64 fields");
            goto done;
        }
        PyObject *value = read_node(node->children[i], c);
        if (value == NULL) goto done;
        if (node->converters[i] != NULL && value != Py_None) {
            value = convert(node->converters[i], value);
            if (value == NULL) goto done;
        }
        values[n++] = value;
    }
    out = PyObject_Vectorcall(node->obj, values, (size_t)n, NULL);
done:
    for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(values[i]);
    return out;
}

static PyObject *read_record(const Node *node, Cursor *c) {
    if (node->obj != NULL) return build_record(node, c);
    PyObject *record = PyDict_New();
    if (record == NULL) return NULL;
    for (Py_ssize_t i = 0; i < node->n; i++) {
        if (node->names[i] == NULL) {
            if (skip_node(node->children[i], c) < 0) goto fail;
            continue;
        }
        PyObject *value = read_node(node->children[i], c);
        if (value == NULL) goto fail;
        if (node->converters[i] != NULL && value != Py_None) {
            value = convert(node->converters[i], value);
            if (value == NULL) goto fail;
        }
        int failed = PyDict_SetItem(record, node->names[i], value);
        Py_DECREF(value);
        if (failed < 0) goto fail;
    }
    return record;
fail:
    Py_DECREF(record);
    return NULL;
}

static PyObject *read_blocks(const Node *node, Cursor *c) {
    int is_map = node->kind == K_MAP;
    PyObject *out = is_map ? PyDict_New() : PyList_New(0);
    if (out == NULL) return NULL;
    long long n;
    Py_ssize_t size;
    for (;;) {
        int more = block_count(node, c, &n);
        if (more < 0) goto fail;
        if (more == 0) return out;
        for (long long i = 0; i < n; i++) {
            PyObject *key = NULL;
            if (is_map) {
                if (read_size(c, &size) < 0) goto fail;
                key = PyUnicode_DecodeUTF8((const char *)c->buf + c->pos, size, NULL);
                if (key == NULL) goto fail;
                c->pos += size;
            }
            PyObject *item = read_node(node->children[0], c);
            if (item == NULL) { Py_XDECREF(key); goto fail; }
            int failed = is_map ? PyDict_SetItem(out, key, item) : PyList_Append(out, item);
            Py_XDECREF(key);
            Py_DECREF(item);
            if (failed < 0) goto fail;
        }
    }
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *read_node(const Node *node, Cursor *c) {
    long long n;
    Py_ssize_t size;
    switch (node->kind) {
    case K_NULL:
        Py_RETURN_NONE;
    case K_BOOL:
        if (c->pos >= c->len) { eof(); return NULL; }
        return PyBool_FromLong(c->buf[c->pos++] != 0);
    case K_INT:
        if (read_long(c, &n) < 0) return NULL;
        if (n < -2147483648LL || n > 2147483647LL) {
            PyErr_Format(PyExc_ValueError, "%lld does not fit int32", n);
            return NULL;
        }
        return PyLong_FromLongLong(n);
    case K_LONG:
        if (read_long(c, &n) < 0) return NULL;
        return PyLong_FromLongLong(n);
    case K_FLOAT: {
        if (c->len - c->pos < 4) { eof(); return NULL; }
        double d = PyFloat_Unpack4((const char *)c->buf + c->pos, 1);
        if (d == -1.0 && PyErr_Occurred()) return NULL;
        c->pos += 4;
        return PyFloat_FromDouble(d);
    }
    case K_DOUBLE: {
        if (c->len - c->pos < 8) { eof(); return NULL; }
        double d = PyFloat_Unpack8((const char *)c->buf + c->pos, 1);
        if (d == -1.0 && PyErr_Occurred()) return NULL;
        c->pos += 8;
        return PyFloat_FromDouble(d);
    }
    case K_STRING: {
        if (read_size(c, &size) < 0) return NULL;
        PyObject *s = PyUnicode_DecodeUTF8((const char *)c->buf + c->pos, size, NULL);
        c->pos += size;
        return s;
    }
    case K_BYTES:
        if (read_size(c, &size) < 0) return NULL;
        c->pos += size;
        return PyBytes_FromStringAndSize((const char *)c->buf + c->pos - size, size);
    case K_FIXED:
        if (c->len - c->pos < node->n) { eof(); return NULL; }
        c->pos += node->n;
        return PyBytes_FromStringAndSize((const char *)c->buf + c->pos - node->n, node->n);
    case K_ENUM: {
        if (read_long(c, &n) < 0) return NULL;
        Py_ssize_t count = PyTuple_GET_SIZE(node->obj);
        if (n < 0) n += count;  /* a negative index counts from the end, as Python's does */
        if (n < 0 || n >= count) {
            PyErr_SetString(PyExc_IndexError, "enum index out of range");
            return NULL;
        }
        return Py_NewRef(PyTuple_GET_ITEM(node->obj, n));
    }
    case K_RECORD:
        return read_record(node, c);
    case K_UNION:
        if (read_long(c, &n) < 0) return NULL;
        if (n < 0) n += node->n;
        if (n < 0 || n >= node->n) {
            PyErr_SetString(PyExc_IndexError, "union branch out of range");
            return NULL;
        }
        return read_node(node->children[n], c);
    case K_ARRAY: case K_MAP:
        return read_blocks(node, c);
    case K_CALL: {
        PyObject *value = read_node(node->children[0], c);
        if (value == NULL) return NULL;
        PyObject *out;
        if (node->args == NULL) {
            out = PyObject_CallOneArg(node->obj, value);
        } else {
            Py_ssize_t extra = PyTuple_GET_SIZE(node->args);
            PyObject *argv[8];
            if (extra > 7) {
                Py_DECREF(value);
                PyErr_SetString(PyExc_ValueError, "a call takes at most 7 extra arguments");
                return NULL;
            }
            argv[0] = value;
            for (Py_ssize_t i = 0; i < extra; i++) argv[i + 1] = PyTuple_GET_ITEM(node->args, i);
            out = PyObject_Vectorcall(node->obj, argv, (size_t)(extra + 1), NULL);
        }
        Py_DECREF(value);
        return out;
    }
    case K_SKIP:
        if (skip_node(node->children[0], c) < 0) return NULL;
        Py_RETURN_NONE;
    case K_GATE:
        return read_gate(node, c);
    case K_DECIMAL: {
        const Node *raw = node->children[0];
        if (raw->kind == K_FIXED) {
            size = raw->n;
            if (c->len - c->pos < size) { eof(); return NULL; }
        } else if (read_size(c, &size) < 0) {
            return NULL;
        }
        c->pos += size;
        return read_decimal(node, c->buf + c->pos - size, size);
    }
    }
    PyErr_SetString(PyExc_SystemError, "unknown node");
    return NULL;
}

/* -- the Program type ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Node *root;
    PyObject *plan;
    vectorcallfunc vectorcall;
} Program;

static PyObject *program_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a program takes (buf, pos)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) { PyBuffer_Release(&view); return NULL; }
    if (pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos outside the bytes");
        return NULL;
    }
    Cursor c = {(const unsigned char *)view.buf, view.len, pos, view.len + SPARE_ITEMS};
    PyObject *datum = read_node(((Program *)self)->root, &c);
    PyBuffer_Release(&view);
    if (datum == NULL) return NULL;
    PyObject *end = PyLong_FromSsize_t(c.pos);
    if (end == NULL) { Py_DECREF(datum); return NULL; }
    PyObject *out = PyTuple_Pack(2, datum, end);
    Py_DECREF(datum);
    Py_DECREF(end);
    return out;
}

static PyObject *program_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *plan;
    static char *keywords[] = {"plan", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Program", keywords, &plan)) return NULL;
    Node *root = node_new(plan, 0);
    if (root == NULL) return NULL;
    Program *self = (Program *)type->tp_alloc(type, 0);
    if (self == NULL) { node_free(root); return NULL; }
    self->root = root;
    self->plan = Py_NewRef(plan);
    self->vectorcall = program_vectorcall;
    return (PyObject *)self;
}

static int program_traverse(Program *self, visitproc visit, void *arg) {
    Py_VISIT(self->plan);  /* the plan holds every object the nodes refer to */
    return 0;
}

static int program_clear(Program *self) {
    Py_CLEAR(self->plan);
    return 0;
}

static void program_dealloc(Program *self) {
    PyObject_GC_UnTrack(self);
    node_free(self->root);
    program_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *program_get_plan(Program *self, void *Py_UNUSED(closure)) {
    return Py_NewRef(self->plan);
}

static PyGetSetDef program_getset[] = {
    {"plan", (getter)program_get_plan, NULL, "the plan this program was built from", NULL},
    {NULL}
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bizevents.contracts.avro_codegen._native.Program",
    .tp_doc = "Program(plan): program(buf, pos) -> (datum, pos after it)",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = program_new,
    .tp_dealloc = (destructor)program_dealloc,
    .tp_traverse = (traverseproc)program_traverse,
    .tp_clear = (inquiry)program_clear,
    .tp_vectorcall_offset = offsetof(Program, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getset = program_getset,
};

/* -- the Slots type: instances of a slotted class without its __init__ ------------------ */

/* Slots(cls, names): slots(*values) -> an instance of cls whose slot names[i] holds
 * values[i], written straight into the object as the reader's builders make envelopes,
 * sources and positions (frozen dataclasses, whose __init__ sets each field through
 * object.__setattr__). native.py hands it only classes whose __init__ does nothing else. */

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    Py_ssize_t n;
    Py_ssize_t *offsets;
    vectorcallfunc vectorcall;
} Slots;

static PyObject *slots_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    Slots *slots = (Slots *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != slots->n || kwnames != NULL) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd positional values", slots->cls->tp_name,
                     slots->n);
        return NULL;
    }
    PyObject *obj = slots->cls->tp_alloc(slots->cls, 0);
    if (obj == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject **at = (PyObject **)((char *)obj + slots->offsets[i]);
        PyObject *old = *at;
        *at = Py_NewRef(args[i]);
        Py_XDECREF(old);
    }
    return obj;
}

static PyObject *slots_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *cls, *names;
    static char *keywords[] = {"cls", "names", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!:Slots", keywords, &PyType_Type, &cls,
                                     &PyTuple_Type, &names))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    Py_ssize_t *offsets = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    if (offsets == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttr(cls, PyTuple_GET_ITEM(names, i));
        if (descr == NULL) { PyMem_Free(offsets); return NULL; }
        int member = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                     ((PyMemberDescrObject *)descr)->d_common.d_type == (PyTypeObject *)cls;
        if (member) offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!member) {
            PyMem_Free(offsets);
            PyErr_Format(PyExc_TypeError, "%R is not a slot of %R", PyTuple_GET_ITEM(names, i),
                         cls);
            return NULL;
        }
    }
    Slots *self = (Slots *)type->tp_alloc(type, 0);
    if (self == NULL) { PyMem_Free(offsets); return NULL; }
    self->cls = (PyTypeObject *)Py_NewRef(cls);
    self->n = n;
    self->offsets = offsets;
    self->vectorcall = slots_vectorcall;
    return (PyObject *)self;
}

static int slots_traverse(Slots *self, visitproc visit, void *arg) {
    Py_VISIT(self->cls);
    return 0;
}

static int slots_clear(Slots *self) {
    Py_CLEAR(self->cls);
    return 0;
}

static void slots_dealloc(Slots *self) {
    PyObject_GC_UnTrack(self);
    PyMem_Free(self->offsets);
    slots_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject SlotsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bizevents.contracts.avro_codegen._native.Slots",
    .tp_doc = "Slots(cls, names): slots(*values) -> an instance of cls with those slots set",
    .tp_basicsize = sizeof(Slots),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = slots_new,
    .tp_dealloc = (destructor)slots_dealloc,
    .tp_traverse = (traverseproc)slots_traverse,
    .tp_clear = (inquiry)slots_clear,
    .tp_vectorcall_offset = offsetof(Slots, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* -- the changes gate of a topic ------------------------------------------------------- */

/* The schema id of Confluent-framed bytes (magic byte 0, four bytes of id); -1 when obj
 * is not exact bytes so framed. */
static long long framed_id(PyObject *obj) {
    if (!PyBytes_CheckExact(obj) || PyBytes_GET_SIZE(obj) < 5) return -1;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(obj);
    if (p[0] != 0) return -1;
    return (long long)p[1] << 24 | (long long)p[2] << 16 | (long long)p[3] << 8 | p[4];
}

/* reader(data, 5) reads data to its end: 1, 0 (it does not, or it raised an Exception:
 * the decoder then gives the verdict), -1 on another error. held: the first of the
 * answer must be True too (a gate's verdict). */
static int reads_whole(PyObject *reader, PyObject *data, int held) {
    PyObject *start = PyLong_FromLong(5);
    if (start == NULL) return -1;
    PyObject *const call_args[2] = {data, start};
    PyObject *answer = PyObject_Vectorcall(reader, call_args, 2, NULL);
    Py_DECREF(start);
    if (answer == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
        return 0;
    }
    int whole = 0;
    if (PyTuple_Check(answer) && PyTuple_GET_SIZE(answer) == 2 &&
        (!held || PyTuple_GET_ITEM(answer, 0) == Py_True)) {
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(answer, 1));
        if (end == -1 && PyErr_Occurred()) PyErr_Clear();
        else whole = end == PyBytes_GET_SIZE(data);
    }
    Py_DECREF(answer);
    return whole;
}

/* unchanged(gates, keys, compile, key, value) -> bool: whether a record is, for sure, an
 * update that changes none of the gated columns (bizevents.contracts.technical.avro.AvroDecoder.gate
 * binds the first three). gates: schema id -> the envelope's gate or None, filled by
 * compile(schema id) for an id first seen; compile raises for an id it cannot answer
 * for yet (nothing is remembered: the gates stay as many as the schemas the decoder
 * read, whatever ids the records carry); keys: schema id -> the decoder's key plan
 * (its read, or None). The value must be framed and its gate hold to its last byte;
 * the key, when there is one, must be framed and read whole, as the decoder reads it. */
static PyObject *unchanged(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "unchanged(gates, keys, compile, key, value)");
        return NULL;
    }
    PyObject *gates = args[0], *keys = args[1], *key = args[3], *value = args[4];
    long long id = framed_id(value);
    if (id < 0) Py_RETURN_FALSE;
    PyObject *number = PyLong_FromLongLong(id);
    if (number == NULL) return NULL;
    PyObject *gate = PyDict_GetItemWithError(gates, number);  /* borrowed */
    if (gate == NULL && !PyErr_Occurred()) {
        PyObject *made = PyObject_CallOneArg(args[2], number);
        if (made == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
            /* no gate yet (a schema the decoder has not read, a registry out of reach):
             * nothing is remembered, the decoder decides */
            PyErr_Clear();
            Py_DECREF(number);
            Py_RETURN_FALSE;
        }
        if (made != NULL && PyDict_SetItem(gates, number, made) == 0) gate = made;
        Py_XDECREF(made);  /* the dict holds it */
    }
    Py_DECREF(number);
    if (gate == NULL) return NULL;
    if (gate == Py_None) Py_RETURN_FALSE;
    int whole = reads_whole(gate, value, 1);
    if (whole <= 0) return whole < 0 ? NULL : Py_NewRef(Py_False);
    if (key == Py_None) Py_RETURN_TRUE;
    if ((id = framed_id(key)) < 0) Py_RETURN_FALSE;
    if ((number = PyLong_FromLongLong(id)) == NULL) return NULL;
    PyObject *plan = PyDict_GetItemWithError(keys, number);  /* borrowed */
    Py_DECREF(number);
    if (plan == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    PyObject *read = PyObject_GetAttr(plan, ATTR_read);
    if (read == NULL) return NULL;
    whole = read == Py_None ? 0 : reads_whole(read, key, 0);
    Py_DECREF(read);
    return whole < 0 ? NULL : PyBool_FromLong(whole);
}

/* -- the compiled writer of a contract ----------------------------------------------------
 *
 * WritePlan(plan)(model[, lineage]) -> the Avro body of a pydantic model's instance,
 * the bytes bizevents.contracts.avro_codegen.writer's generated writer gives (and raising where
 * it raises), from a write plan of nested tuples (bizevents.contracts.avro_codegen.native,
 * compile_native_writer), one node per Avro type:
 *   (W_NULL,) (W_BOOLEAN,) (W_LONG, 32 or 64) (W_FLOAT,) (W_DOUBLE,) (W_STRING,)
 *   (W_BYTES,) (W_FIXED, size) (W_ENUM, {symbol: its index's bytes})
 *   (W_RECORD, names, nodes, plain models (a set), check_model, index of the lineage or -1):
 *       a model's fields by name, or a tuple's items in order (a record as its values)
 *   (W_ARRAY, items) (W_MAP, values) (W_UNION, null branch's bytes or None, the other's, node)
 *   (W_CALL, prepare, schema, node): the value prepare(value, schema) gives, written by node
 *   (W_DECIMAL, prepare, schema, node, Decimal, precision, scale): a W_CALL of fastavro's
 *       prepare_bytes_decimal whose usual values (a Decimal of at most 18 digits at the
 *       schema's scale) are written here, as prepare gives them
 *   (W_MICROS, prepare, schema, node, epoch): a W_CALL of fastavro's
 *       prepare_timestamp_micros whose aware datetimes are written here, as prepare gives them
 * (fastavro's conversions cost more than the rest of a small event: a Decimal's as_tuple()
 * alone is a named tuple made in Python.)
 */

enum { W_NULL, W_BOOLEAN, W_LONG, W_FLOAT, W_DOUBLE, W_STRING, W_BYTES, W_FIXED, W_ENUM,
       W_RECORD, W_ARRAY, W_MAP, W_UNION, W_CALL, W_DECIMAL, W_MICROS };

static int fail(const char *message) {
    PyErr_SetString(PyExc_TypeError, message);
    return -1;
}

static int write_node(PyObject *node, PyObject *value, Text *out, PyObject *lineage);

static int write_record(PyObject *node, PyObject *model, Text *out, PyObject *lineage) {
    PyObject *names = PyTuple_GET_ITEM(node, 1), *nodes = PyTuple_GET_ITEM(node, 2);
    PyObject *plain = PyTuple_GET_ITEM(node, 3);
    if (PyTuple_CheckExact(model)) {  /* a record given as its fields' values, in order */
        if (PyTuple_GET_SIZE(model) != PyTuple_GET_SIZE(nodes)) return fail("not a record");
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(nodes); i++)
            if (write_node(PyTuple_GET_ITEM(nodes, i), PyTuple_GET_ITEM(model, i), out, Py_None) < 0)
                return -1;
        return 0;
    }
    Py_ssize_t prewritten = PyLong_AsSsize_t(PyTuple_GET_ITEM(node, 5));
    int known = PySet_Contains(plain, (PyObject *)Py_TYPE(model));
    if (known < 0) return -1;
    if (!known) {  /* checked (and remembered) by writer._check_model, or it raises */
        PyObject *checked = PyObject_CallOneArg(PyTuple_GET_ITEM(node, 4), (PyObject *)Py_TYPE(model));
        if (checked == NULL) return -1;
        Py_DECREF(checked);
    }
    PyObject *values = PyObject_GetAttr(model, ATTR_dict);
    if (values == NULL) return -1;
    int done = 0;
    if (!PyDict_Check(values)) done = fail("a model's __dict__ is not a dict");
    for (Py_ssize_t i = 0; done == 0 && i < PyTuple_GET_SIZE(names); i++) {
        if (i == prewritten && lineage != Py_None) {  /* the caller's bytes, as they are */
            Py_buffer view;
            if (PyObject_GetBuffer(lineage, &view, PyBUF_SIMPLE) < 0) { done = -1; break; }
            done = text_add(out, view.buf, view.len);
            PyBuffer_Release(&view);
            continue;
        }
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *item = PyDict_GetItemWithError(values, name);  /* borrowed */
        if (item == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, name);
            done = -1;
            break;
        }
        Py_INCREF(item);  /* a conversion below may run Python that changes the dict */
        done = write_node(PyTuple_GET_ITEM(nodes, i), item, out, Py_None);
        Py_DECREF(item);
    }
    Py_DECREF(values);
    return done;
}

static int write_items(PyObject *node, PyObject *value, Text *out) {
    PyObject *items = PyTuple_GET_ITEM(node, 1);
    if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) return fail("not a list");
    PyObject *fast = PySequence_Fast(value, "not a list");  /* the list or tuple itself */
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int done = 0;
    if (n > 0) done = put_varint(out, n);
    for (Py_ssize_t i = 0; done == 0 && i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(fast, i));
        done = write_node(items, item, out, Py_None);
        Py_DECREF(item);
    }
    Py_DECREF(fast);
    return done < 0 ? -1 : text_add(out, "\0", 1);
}

static int write_map(PyObject *node, PyObject *value, Text *out) {
    if (!PyDict_Check(value)) return fail("not a dict");
    PyObject *pairs = PyDict_Items(value);  /* a snapshot, as the Python's items() reads it */
    if (pairs == NULL) return -1;
    Py_ssize_t n = PyList_GET_SIZE(pairs);
    int done = 0;
    if (n > 0) done = put_varint(out, n);
    for (Py_ssize_t i = 0; done == 0 && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        PyObject *key = PyTuple_GET_ITEM(pair, 0);
        if (!PyUnicode_CheckExact(key)) { done = fail("not a string"); break; }
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(key, &size);
        if (text == NULL || put_blob_of(out, text, size) < 0) { done = -1; break; }
        done = write_node(PyTuple_GET_ITEM(node, 1), PyTuple_GET_ITEM(pair, 1), out, Py_None);
    }
    Py_DECREF(pairs);
    return done < 0 ? -1 : text_add(out, "\0", 1);
}

/* A W_CALL (or W_DECIMAL, W_MICROS) node's value the Python way: prepare(value, schema),
 * written by the node's node. */
static int write_prepared(PyObject *node, PyObject *value, Text *out) {
    PyObject *const call_args[2] = {value, PyTuple_GET_ITEM(node, 2)};
    PyObject *prepared = PyObject_Vectorcall(PyTuple_GET_ITEM(node, 1), call_args, 2, NULL);
    if (prepared == NULL) return -1;
    int done = write_node(PyTuple_GET_ITEM(node, 3), prepared, out, Py_None);
    Py_DECREF(prepared);
    return done;
}

/* The coefficient, its digits (as Decimal.as_tuple() counts them) and the exponent of a
 * Decimal's text (str(), the scientific string: "-12.30", "1.2E+7", "0E-8"); 0 for a
 * text that is no finite number or has more than 18 digits. */
static int decimal_parts(const char *s, Py_ssize_t size, int *negative,
                         unsigned long long *coefficient, int *digits, long long *exponent) {
    Py_ssize_t i = 0;
    int point = 0, seen = 0, fraction = 0;
    *negative = size > 0 && s[0] == '-';
    i = *negative;
    *coefficient = 0;
    *digits = 0;
    for (; i < size; i++) {
        char c = s[i];
        if (c == '.' && !point) { point = 1; continue; }
        if (c < '0' || c > '9') break;
        seen = 1;
        fraction += point;
        if (*digits == 0 && c == '0') continue;  /* a leading zero is no digit of it */
        if (++*digits > 18) return 0;
        *coefficient = *coefficient * 10 + (unsigned long long)(c - '0');
    }
    if (!seen) return 0;  /* NaN, Infinity */
    if (*digits == 0) *digits = 1;  /* zero: the one digit 0 */
    long long e = 0;
    if (i < size) {
        if (s[i] != 'E' || ++i >= size) return 0;
        int minus = s[i] == '-';
        if (s[i] == '-' || s[i] == '+') i++;
        if (i >= size) return 0;
        for (; i < size; i++) {
            if (s[i] < '0' || s[i] > '9' || e > 100000000) return 0;
            e = e * 10 + (s[i] - '0');
        }
        if (minus) e = -e;
    }
    *exponent = e - fraction;
    return 1;
}

/* W_DECIMAL: a Decimal written as fastavro's prepare_bytes_decimal gives it (its
 * unscaled value at the schema's scale, big-endian two's complement in
 * (bit_length + 8) // 8 bytes); 1 when written, 0 when the value is not of the usual kind
 * (then prepare writes it or raises), -1 on error. */
static int write_decimal(PyObject *node, PyObject *value, Text *out) {
    if ((PyObject *)Py_TYPE(value) != PyTuple_GET_ITEM(node, 4)) return 0;
    long long precision = PyLong_AsLongLong(PyTuple_GET_ITEM(node, 5));
    long long scale = PyLong_AsLongLong(PyTuple_GET_ITEM(node, 6));
    PyObject *str = PyObject_Str(value);
    if (str == NULL) return -1;
    Py_ssize_t size;
    const char *s = PyUnicode_AsUTF8AndSize(str, &size);
    if (s == NULL) { Py_DECREF(str); return -1; }
    int negative, digits;
    unsigned long long coefficient;
    long long exponent;
    int parsed = decimal_parts(s, size, &negative, &coefficient, &digits, &exponent);
    Py_DECREF(str);
    long long delta = exponent + scale;
    /* what prepare refuses (too many digits, a finer scale) it refuses itself */
    if (!parsed || digits > precision || delta < 0 || digits + delta > 18) return 0;
    for (long long k = 0; k < delta; k++) coefficient *= 10;
    int bits = 0;
    for (unsigned long long v = coefficient; v != 0; v >>= 1) bits++;
    int width = (bits + 8) / 8;
    unsigned long long n = negative ? 0ULL - coefficient : coefficient;
    char bytes[8];
    for (int k = width - 1; k >= 0; k--) {
        bytes[k] = (char)(n & 0xFF);
        n >>= 8;
    }
    return put_blob_of(out, bytes, width) < 0 ? -1 : 1;
}

/* W_MICROS: an aware datetime written as fastavro's prepare_timestamp_micros gives it
 * (the microseconds of value - epoch); 1 when written, 0 for another value (then prepare
 * writes it or raises), -1 on error. */
static int write_micros(PyObject *node, PyObject *value, Text *out) {
    if (!PyDateTime_CheckExact(value) || PyDateTime_DATE_GET_TZINFO(value) == Py_None) return 0;
    PyObject *delta = PyNumber_Subtract(value, PyTuple_GET_ITEM(node, 4));
    if (delta == NULL) return -1;  /* what prepare's own value - epoch raises */
    if (!PyDelta_CheckExact(delta)) { Py_DECREF(delta); return 0; }
    long long days = PyDateTime_DELTA_GET_DAYS(delta);
    long long seconds = PyDateTime_DELTA_GET_SECONDS(delta);
    long long micros = PyDateTime_DELTA_GET_MICROSECONDS(delta);
    Py_DECREF(delta);
    /* an aware datetime is within 3,700,000 days of 1970: no overflow below */
    if (days > 100000000 || days < -100000000) return 0;
    return put_varint(out, (days * 86400 + seconds) * 1000000 + micros) < 0 ? -1 : 1;
}

static int write_node(PyObject *node, PyObject *value, Text *out, PyObject *lineage) {
    switch (PyLong_AsLong(PyTuple_GET_ITEM(node, 0))) {
    case W_NULL:
        return value == Py_None ? 0 : fail("not null");
    case W_BOOLEAN:
        if (value == Py_True) return text_add(out, "\1", 1);
        if (value == Py_False) return text_add(out, "\0", 1);
        return fail("not a boolean");
    case W_LONG: {
        if (!PyLong_CheckExact(value)) return fail("not an integer of the Avro type");
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) return -1;
        int wide = PyLong_AsLong(PyTuple_GET_ITEM(node, 1)) == 64;
        if (overflow || (!wide && (number < INT32_MIN || number > INT32_MAX)))
            return fail("not an integer of the Avro type");
        return put_varint(out, number);
    }
    case W_FLOAT:
    case W_DOUBLE: {
        if (!PyFloat_CheckExact(value)) return fail("not a float");
        char bytes[8];
        double number = PyFloat_AS_DOUBLE(value);
        int four = PyLong_AsLong(PyTuple_GET_ITEM(node, 0)) == W_FLOAT;
        if ((four ? PyFloat_Pack4(number, bytes, 1) : PyFloat_Pack8(number, bytes, 1)) < 0)
            return -1;
        return text_add(out, bytes, four ? 4 : 8);
    }
    case W_STRING: {
        if (!PyUnicode_CheckExact(value)) return fail("not a string");
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(value, &size);
        return text == NULL ? -1 : put_blob_of(out, text, size);
    }
    case W_BYTES:
        if (!PyBytes_CheckExact(value)) return fail("not bytes");
        return put_blob_of(out, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
    case W_FIXED:
        if (!PyBytes_CheckExact(value) ||
            PyBytes_GET_SIZE(value) != PyLong_AsSsize_t(PyTuple_GET_ITEM(node, 1)))
            return fail("not bytes of the fixed size");
        return text_add(out, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
    case W_ENUM: {
        PyObject *symbol;
        if (PyUnicode_CheckExact(value))
            symbol = Py_NewRef(value);
        else if (_PyType_Lookup(Py_TYPE(value), ATTR_value) == ENUM_VALUE)
            symbol = PyObject_GetAttr(value, ATTR_value_);  /* what the property returns */
        else
            symbol = PyObject_GetAttr(value, ATTR_value);
        if (symbol == NULL) return -1;
        PyObject *index = PyObject_GetItem(PyTuple_GET_ITEM(node, 1), symbol);
        Py_DECREF(symbol);
        if (index == NULL) return -1;
        if (!PyBytes_CheckExact(index)) {  /* the plan's dict, changed since it was checked */
            Py_DECREF(index);
            return fail("an enum index that is not bytes");
        }
        int done = text_add(out, PyBytes_AS_STRING(index), PyBytes_GET_SIZE(index));
        Py_DECREF(index);
        return done;
    }
    case W_RECORD:
        return write_record(node, value, out, lineage);
    case W_ARRAY:
        return write_items(node, value, out);
    case W_MAP:
        return write_map(node, value, out);
    case W_UNION: {
        PyObject *null_branch = PyTuple_GET_ITEM(node, 1);
        if (value == Py_None && null_branch != Py_None)
            return text_add(out, PyBytes_AS_STRING(null_branch), PyBytes_GET_SIZE(null_branch));
        PyObject *branch = PyTuple_GET_ITEM(node, 2);
        if (text_add(out, PyBytes_AS_STRING(branch), PyBytes_GET_SIZE(branch)) < 0) return -1;
        return write_node(PyTuple_GET_ITEM(node, 3), value, out, Py_None);
    }
    case W_CALL:
        return write_prepared(node, value, out);
    case W_DECIMAL: {
        int done = write_decimal(node, value, out);
        return done == 0 ? write_prepared(node, value, out) : (done < 0 ? -1 : 0);
    }
    case W_MICROS: {
        int done = write_micros(node, value, out);
        return done == 0 ? write_prepared(node, value, out) : (done < 0 ? -1 : 0);
    }
    default:
        PyErr_SetString(PyExc_ValueError, "write_model: a node of an unknown kind");
        return -1;
    }
}

/* A write plan node checked, with its children, before any is written: write_node reads
 * nodes without checks. 0, or -1 with an exception naming what is wrong. */
static int check_write(PyObject *node, int depth) {
    if (depth > 200) {
        PyErr_SetString(PyExc_ValueError, "a write plan nested more than 200 deep");
        return -1;
    }
    if (!PyTuple_CheckExact(node) || PyTuple_GET_SIZE(node) < 1 ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(node, 0))) {
        PyErr_SetString(PyExc_TypeError, "a write plan node is a tuple (kind, ...)");
        return -1;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(node, 0));
    Py_ssize_t size = PyTuple_GET_SIZE(node);
    PyObject *const *item = &PyTuple_GET_ITEM(node, 0);
    int ok;
    switch (kind) {
    case W_NULL: case W_BOOLEAN: case W_FLOAT: case W_DOUBLE: case W_STRING: case W_BYTES:
        ok = size == 1;
        break;
    case W_LONG:
        ok = size == 2 && PyLong_CheckExact(item[1]) &&
             (PyLong_AsLong(item[1]) == 32 || PyLong_AsLong(item[1]) == 64);
        break;
    case W_FIXED:
        ok = size == 2 && PyLong_CheckExact(item[1]);
        break;
    case W_ENUM: {
        ok = size == 2 && PyDict_CheckExact(item[1]);
        Py_ssize_t pos = 0;
        PyObject *symbol, *index;
        while (ok && PyDict_Next(item[1], &pos, &symbol, &index)) ok = PyBytes_CheckExact(index);
        break;
    }
    case W_RECORD:
        ok = size == 6 && PyTuple_CheckExact(item[1]) && PyTuple_CheckExact(item[2]) &&
             PyTuple_GET_SIZE(item[1]) == PyTuple_GET_SIZE(item[2]) && PyAnySet_Check(item[3]) &&
             PyCallable_Check(item[4]) && PyLong_CheckExact(item[5]);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(item[1]); i++) {
            ok = PyUnicode_CheckExact(PyTuple_GET_ITEM(item[1], i));
            if (ok && check_write(PyTuple_GET_ITEM(item[2], i), depth + 1) < 0) return -1;
        }
        break;
    case W_ARRAY: case W_MAP:
        ok = size == 2;
        if (ok && check_write(item[1], depth + 1) < 0) return -1;
        break;
    case W_UNION:
        ok = size == 4 && (item[1] == Py_None || PyBytes_CheckExact(item[1])) &&
             PyBytes_CheckExact(item[2]);
        if (ok && check_write(item[3], depth + 1) < 0) return -1;
        break;
    case W_CALL:
        ok = size == 4 && PyCallable_Check(item[1]);
        if (ok && check_write(item[3], depth + 1) < 0) return -1;
        break;
    case W_DECIMAL:
        /* its node writes bytes, as the fast path does */
        ok = size == 7 && PyCallable_Check(item[1]) && PyType_Check(item[4]) &&
             PyLong_CheckExact(item[5]) && PyLong_CheckExact(item[6]) &&
             PyLong_AsLongLong(item[5]) >= 0 && PyLong_AsLongLong(item[6]) >= 0 &&
             PyLong_AsLongLong(item[6]) <= 1000000 && PyTuple_CheckExact(item[3]) &&
             PyTuple_GET_SIZE(item[3]) == 1 && PyLong_CheckExact(PyTuple_GET_ITEM(item[3], 0)) &&
             PyLong_AsLong(PyTuple_GET_ITEM(item[3], 0)) == W_BYTES;
        if (ok && check_write(item[3], depth + 1) < 0) return -1;
        break;
    case W_MICROS:
        /* its node writes a long, as the fast path does */
        ok = size == 5 && PyCallable_Check(item[1]) && PyDateTime_CheckExact(item[4]) &&
             PyTuple_CheckExact(item[3]) && PyTuple_GET_SIZE(item[3]) == 2 &&
             PyLong_CheckExact(PyTuple_GET_ITEM(item[3], 0)) &&
             PyLong_AsLong(PyTuple_GET_ITEM(item[3], 0)) == W_LONG &&
             PyLong_CheckExact(PyTuple_GET_ITEM(item[3], 1)) &&
             PyLong_AsLong(PyTuple_GET_ITEM(item[3], 1)) == 64;
        if (ok && check_write(item[3], depth + 1) < 0) return -1;
        break;
    default:
        PyErr_Format(PyExc_ValueError, "a write plan node of an unknown kind %ld", kind);
        return -1;
    }
    if (PyErr_Occurred()) return -1;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "a write plan node of kind %ld is malformed: %R", kind, node);
        return -1;
    }
    return 0;
}

/* WritePlan(plan): the plan checked once (check_write); write_plan(model, lineage=None)
 * -> the Avro body of a contract's instance. */
typedef struct {
    PyObject_HEAD
    PyObject *plan;
    vectorcallfunc vectorcall;
} WritePlan;

static PyObject *write_plan_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                       PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || nargs > 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a write plan takes (model, lineage=None)");
        return NULL;
    }
    Text out;
    text_init(&out);
    int done = write_node(((WritePlan *)self)->plan, args[0], &out, nargs == 2 ? args[1] : Py_None);
    PyObject *made = done < 0 ? NULL : PyBytes_FromStringAndSize(out.data, out.size);
    text_free(&out);
    return made;
}

static PyObject *write_plan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *plan;
    static char *keywords[] = {"plan", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:WritePlan", keywords, &plan)) return NULL;
    if (check_write(plan, 0) < 0) return NULL;
    WritePlan *self = (WritePlan *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->plan = Py_NewRef(plan);
    self->vectorcall = write_plan_vectorcall;
    return (PyObject *)self;
}

static int write_plan_traverse(WritePlan *self, visitproc visit, void *arg) {
    Py_VISIT(self->plan);
    return 0;
}

static int write_plan_clear(WritePlan *self) {
    Py_CLEAR(self->plan);
    return 0;
}

static void write_plan_dealloc(WritePlan *self) {
    PyObject_GC_UnTrack(self);
    write_plan_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject WritePlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bizevents.contracts.avro_codegen._native.WritePlan",
    .tp_doc = "WritePlan(plan): write_plan(model, lineage=None) -> the Avro body of a contract",
    .tp_basicsize = sizeof(WritePlan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = write_plan_new,
    .tp_dealloc = (destructor)write_plan_dealloc,
    .tp_traverse = (traverseproc)write_plan_traverse,
    .tp_clear = (inquiry)write_plan_clear,
    .tp_vectorcall_offset = offsetof(WritePlan, vectorcall),
    .tp_call = PyVectorcall_Call,
};

static PyMethodDef methods[] = {
    {"unchanged", (PyCFunction)(void (*)(void))unchanged, METH_FASTCALL,
     "unchanged(gates, keys, compile, key, value) -> bool: a topic's changes gate"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "The project's compiled Avro reader and writer (see contracts/avro_codegen/native.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    if (PyType_Ready(&ProgramType) < 0 || PyType_Ready(&SlotsType) < 0 ||
        PyType_Ready(&WritePlanType) < 0)
        return NULL;
    PyObject *gen = PyImport_ImportModule("bizevents.contracts.avro_codegen.gen");
    if (gen == NULL) return NULL;
    Refused = PyObject_GetAttrString(gen, "Refused");
    Py_DECREF(gen);
    if (Refused == NULL) return NULL;
    struct { PyObject **slot; const char *name; } attrs[] = {
        {&ATTR_tzinfo, "tzinfo"},
        {&ATTR_read, "read"},
        {&ATTR_dict, "__dict__"},
        {&ATTR_value, "value"},
        {&ATTR_value_, "_value_"},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        if ((*attrs[i].slot = PyUnicode_InternFromString(attrs[i].name)) == NULL) return NULL;
    }
    PyObject *enum_module = PyImport_ImportModule("enum");
    if (enum_module == NULL) return NULL;
    PyObject *enum_type = PyObject_GetAttrString(enum_module, "Enum");
    Py_DECREF(enum_module);
    if (enum_type == NULL) return NULL;
    if (!PyType_Check(enum_type)) {
        Py_DECREF(enum_type);
        PyErr_SetString(PyExc_TypeError, "enum.Enum is not a type");
        return NULL;
    }
    ENUM_VALUE = Py_XNewRef(PyDict_GetItemWithError(((PyTypeObject *)enum_type)->tp_dict, ATTR_value));
    Py_DECREF(enum_type);
    if (ENUM_VALUE == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "enum.Enum has no value");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *kinds = PyTuple_New(K_GATE + 1);
    if (kinds == NULL) { Py_DECREF(m); return NULL; }
    for (int i = 0; i <= K_GATE; i++) {
        PyObject *kind = PyUnicode_FromString(KINDS[i]);
        if (kind == NULL) { Py_DECREF(kinds); Py_DECREF(m); return NULL; }
        PyTuple_SET_ITEM(kinds, i, kind);
    }
    int added = PyModule_AddObjectRef(m, "KINDS", kinds);
    Py_DECREF(kinds);
    if (added < 0 ||
        PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0 ||
        PyModule_AddObjectRef(m, "Slots", (PyObject *)&SlotsType) < 0 ||
        PyModule_AddObjectRef(m, "WritePlan", (PyObject *)&WritePlanType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
