/* pgoutput tuples in C: the two steps of PostgreSQL capture that cost most per change
 * in Python (bench/capture_pg.py's profile). Its own extension module,
 * bizevents.capture.postgres._tuples (built by contracts/avro_codegen/build.py with the
 * others), of the capture floor.
 *
 *   tuple_data(data, pos, unavailable) -> (values tuple, position after it)
 *       One TupleData of a pgoutput message, as pgoutput.py's _python_tuple_data
 *       reads it: None for 'n', unavailable for 'u', str (strict UTF-8) for 't',
 *       bytes for 'b'. Malformed input raises ValueError(offset, reason) with the
 *       Python's offset and reason, which pgoutput.py makes a ProtocolError.
 *   record(plan, fallback, values) -> bytes
 *       The Avro record of one tuple, as codec.py's compiled Python writes it. plan is
 *       a tuple of (index, how, optional, writer, scale) per field; how is 1 for a
 *       string, 2 for an integer, 3 for a boolean, 4 for a numeric of that scale, 5 for
 *       a timestamptz in UTC, and 0 for "call writer(text)". A text that is not the
 *       plain form (more than 18 digits, a plus sign, spaces, another offset) goes to
 *       writer too; a value that is not text (NULL in a required field, an unchanged
 *       TOAST, bytes) sends the whole tuple to fallback(values), the Python's own path.
 *
 * tests/capture/postgres/test_tuples_native.py holds both equal to the Python they
 * replace (hypothesis, hostile bytes included); pgoutput.py and codec.py fall back to
 * that Python when the extension is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_text.h"

/* -- tuple_data ------------------------------------------------------------------------ */

/* Raises ValueError(offset, reason); returns NULL. */
static PyObject *malformed(Py_ssize_t offset, PyObject *reason) {
    if (reason != NULL) {
        PyObject *args = Py_BuildValue("(nO)", offset, reason);
        if (args != NULL) PyErr_SetObject(PyExc_ValueError, args);
        Py_XDECREF(args);
        Py_DECREF(reason);
    }
    return NULL;
}

static PyObject *too_early(Py_ssize_t offset) {
    return malformed(offset, PyUnicode_FromString("message ends too early"));
}

static int32_t read_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static PyObject *tuple_data(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "tuple_data(data: bytes, pos: int, unavailable)");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "tuple_data: a negative position");
        return NULL;
    }
    PyObject *unavailable = args[2];
    if (pos > end - 2) return too_early(pos);
    int count = (int16_t)(((unsigned)data[pos] << 8) | data[pos + 1]);
    if (count < 0) return malformed(pos, PyUnicode_FromFormat("negative column count %d", count));
    pos += 2;
    PyObject *values = PyTuple_New(count);
    if (values == NULL) return NULL;
    for (int i = 0; i < count; i++) {
        if (pos >= end) goto early;
        unsigned char kind = data[pos];
        PyObject *value;
        if (kind == 't' || kind == 'b') {
            if (pos > end - 5) goto early;
            int32_t length = read_i32(data + pos + 1);
            Py_ssize_t start = pos + 5;
            if (length < 0 || (Py_ssize_t)length > end - start) {
                Py_DECREF(values);
                return malformed(
                    pos + 1, PyUnicode_FromFormat("bad value length %ld", (long)length));
            }
            const char *at = (const char *)data + start;
            if (kind == 't') {
                value = PyUnicode_DecodeUTF8(at, length, "strict");
                if (value == NULL) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto fail;
                    PyErr_Clear();
                    Py_DECREF(values);
                    return malformed(pos, PyUnicode_FromString("a string is not valid UTF-8"));
                }
            } else {
                value = PyBytes_FromStringAndSize(at, length);
                if (value == NULL) goto fail;
            }
            pos = start + length;
        } else if (kind == 'n') {
            value = Py_NewRef(Py_None);
            pos += 1;
        } else if (kind == 'u') {
            value = Py_NewRef(unavailable);
            pos += 1;
        } else {
            Py_DECREF(values);
            return malformed(pos, PyUnicode_FromFormat("unknown TupleData kind %d", (int)kind));
        }
        PyTuple_SET_ITEM(values, i, value);
    }
    PyObject *result = Py_BuildValue("(Nn)", values, pos);
    return result;
early:
    Py_DECREF(values);
    return too_early(pos);
fail:
    Py_DECREF(values);
    return NULL;
}

/* -- record ---------------------------------------------------------------------------- */

enum { HOW_WRITER, HOW_STRING, HOW_INTEGER, HOW_BOOLEAN, HOW_NUMERIC, HOW_UTC_TIMESTAMP };

/* The integer of a plain decimal text ("-?[0-9]{1,18}"); 0 if the text is anything else. */
static int plain_integer(const char *s, Py_ssize_t n, long long *out) {
    Py_ssize_t i = 0;
    int negative = n > 0 && s[0] == '-';
    if (negative) i = 1;
    if (n - i < 1 || n - i > 18) return 0;
    long long value = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        value = value * 10 + (s[i] - '0');
    }
    *out = negative ? -value : value;
    return 1;
}

/* writer(text)'s bytes added to out; -1 with the writer's exception. */
static int put_written(Text *out, PyObject *writer, PyObject *text) {
    PyObject *written = PyObject_CallOneArg(writer, text);
    if (written == NULL) return -1;
    if (!PyBytes_Check(written)) {
        PyErr_SetString(PyExc_TypeError, "a column writer returned something other than bytes");
        Py_DECREF(written);
        return -1;
    }
    int done = text_add(out, PyBytes_AS_STRING(written), PyBytes_GET_SIZE(written));
    Py_DECREF(written);
    return done;
}

/* numeric(p, scale)'s text with exactly scale fraction digits as fastavro writes its
 * unscaled value: the bytes of (bit length + 8) / 8 of two's complement, big-endian.
 * 0 if the text is not that plain form (the writer then takes the Decimal's way). */
static int put_numeric(Text *out, const char *s, Py_ssize_t n, long scale) {
    char digits[20];
    Py_ssize_t count = 0, i = 0;
    const char *dot = memchr(s, '.', (size_t)n);
    if (dot == NULL ? scale != 0 : (n - (dot - s) - 1) != scale) return 0;
    if (n > 0 && s[0] == '-') digits[count++] = s[i++];
    for (; i < n; i++) {
        if (s + i == dot) continue;
        if (count >= 19) return 0;
        digits[count++] = s[i];
    }
    long long value;
    if (!plain_integer(digits, count, &value)) return 0;
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    int bits = 0;
    while (magnitude >> bits) bits++;
    int width = (bits + 8) / 8;
    unsigned char bytes[11];
    int length = zigzag(width, bytes);
    for (int b = 0; b < width; b++)
        bytes[length + b] = (unsigned char)((unsigned long long)value >> (8 * (width - 1 - b)));
    return text_add(out, (const char *)bytes, length + width) < 0 ? -1 : 1;
}

/* 'YYYY-MM-DD HH:MM:SS[.f{0,6}]+00' (the session runs in UTC) as Debezium's ISO text
 * 'YYYY-MM-DDTHH:MM:SS[.ffffff]Z', without looking at the digits, as the writer's
 * shortcut does; 0 for any other text. */
static int put_utc_timestamp(Text *out, PyObject *text) {
    if (!PyUnicode_IS_ASCII(text)) return 0;
    const char *s = (const char *)PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n < 22 || memcmp(s + n - 3, "+00", 3) != 0 || s[10] != ' ' || s[4] != '-') return 0;
    if (n > 22 && (s[19] != '.' || n > 29)) return 0;
    char iso[28];
    memcpy(iso, s, 10);
    iso[10] = 'T';
    memcpy(iso + 11, s + 11, 8);
    Py_ssize_t length = 19;
    if (n > 22) {
        Py_ssize_t fraction = n - 23;
        iso[length++] = '.';
        memcpy(iso + length, s + 20, (size_t)fraction);
        memset(iso + length + fraction, '0', (size_t)(6 - fraction));
        length += 6;
    }
    iso[length++] = 'Z';
    return put_blob_of(out, iso, length) < 0 ? -1 : 1;
}

/* One field's text, as its writer would write it. */
static int put_text(Text *out, long how, long scale, PyObject *writer, PyObject *text) {
    Py_ssize_t n;
    const char *s;
    long long integer;
    int done;
    switch (how) {
        case HOW_STRING:
            s = PyUnicode_AsUTF8AndSize(text, &n);
            return s == NULL ? -1 : put_blob_of(out, s, n);
        case HOW_INTEGER:
            s = PyUnicode_AsUTF8AndSize(text, &n);
            if (s == NULL) return -1;
            if (plain_integer(s, n, &integer)) return put_varint(out, integer);
            break;
        case HOW_BOOLEAN:
            s = PyUnicode_AsUTF8AndSize(text, &n);
            if (s == NULL) return -1;
            if (n == 1 && (s[0] == 't' || s[0] == 'f')) return text_add(out, s[0] == 't' ? "\1" : "\0", 1);
            break;
        case HOW_NUMERIC:
            s = PyUnicode_AsUTF8AndSize(text, &n);
            if (s == NULL) return -1;
            done = put_numeric(out, s, n, scale);
            if (done != 0) return done < 0 ? -1 : 0;
            break;
        case HOW_UTC_TIMESTAMP:
            done = put_utc_timestamp(out, text);
            if (done != 0) return done < 0 ? -1 : 0;
            break;
        default:
            break;
    }
    return put_written(out, writer, text);
}

static PyObject *record(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "record(plan: tuple, fallback, values: tuple)");
        return NULL;
    }
    PyObject *plan = args[0], *fallback = args[1], *values = args[2];
    Py_ssize_t fields = PyTuple_GET_SIZE(plan), width = PyTuple_GET_SIZE(values);
    Text out;
    text_init(&out);
    for (Py_ssize_t i = 0; i < fields; i++) {
        PyObject *field = PyTuple_GET_ITEM(plan, i);
        if (!PyTuple_CheckExact(field) || PyTuple_GET_SIZE(field) != 5) {
            PyErr_SetString(PyExc_TypeError,
                            "a plan's field is (index, how, optional, writer, scale)");
            goto fail;
        }
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(field, 0));
        long how = PyLong_AsLong(PyTuple_GET_ITEM(field, 1));
        int optional = PyObject_IsTrue(PyTuple_GET_ITEM(field, 2));
        long scale = PyLong_AsLong(PyTuple_GET_ITEM(field, 4));
        if (PyErr_Occurred()) goto fail;
        if (index < 0 || index >= width) goto slow;
        PyObject *value = PyTuple_GET_ITEM(values, index);
        if (PyUnicode_CheckExact(value)) {
            if (optional && text_add(&out, "\2", 1) < 0) goto fail;
            if (put_text(&out, how, scale, PyTuple_GET_ITEM(field, 3), value) < 0) goto fail;
        } else if (value == Py_None && optional) {
            if (text_add(&out, "\0", 1) < 0) goto fail;
        } else {
            goto slow;
        }
    }
    PyObject *result = PyBytes_FromStringAndSize(out.data, out.size);
    text_free(&out);
    return result;
slow:
    text_free(&out);
    return PyObject_CallOneArg(fallback, values);
fail:
    text_free(&out);
    return NULL;
}

PyDoc_STRVAR(tuple_data_doc, "One pgoutput TupleData at pos: (values, position after it).");
PyDoc_STRVAR(record_doc, "The Avro record of one tuple, by a table's plan.");

static PyMethodDef methods[] = {
    {"tuple_data", (PyCFunction)(void (*)(void))tuple_data, METH_FASTCALL, tuple_data_doc},
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL, record_doc},
    {NULL, NULL, 0, NULL},
};

/* The module "_tuples": no state of its own (m_size -1). */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tuples",
                                    "pgoutput tuples in C (see capture/postgres/pgoutput.py).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tuples(void) { return PyModule_Create(&module); }
