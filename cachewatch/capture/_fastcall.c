/* The cache-hit path of a watched function, in C.
 *
 * A call of a function returned by `cachewatch.jit` that neither traces nor compiles
 * nor is sampled does three things: count the call, call JAX's jitted function, and
 * see whether anything traced or compiled meanwhile. In Python the frame around those
 * costs as much as JAX's own C++ dispatch of a tiny function; here it costs a few
 * machine instructions. Every other case (a sampled call, a call that traced or
 * compiled, a call that raised after tracing) is handed to the Python callables the
 * watched function was made with, so the logic lives in one place: cachewatch/capture/jit.py.
 *
 * Python/jit.py keeps a pure-Python twin of this path for when this module cannot be
 * built; the tests run both.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <unistd.h>

/* Bumped by cachewatch.capture._tracking (under its lock, with the GIL held) whenever a trace
 * or compile is recorded; a call that sees it unchanged did neither. */
static unsigned long long activity = 0;

/* ------------------------------------------------------------------ Counter */

/* The call counter of one function, shared by every watched object around it. The
 * Python class CallStats derives from it and adds the sampling state. */
typedef struct {
    PyObject_HEAD
    long long calls;
    long long next_sample;
} Counter;

static PyMemberDef counter_members[] = {
    {"calls", T_LONGLONG, offsetof(Counter, calls), 0, "calls so far"},
    {"next_sample", T_LONGLONG, offsetof(Counter, next_sample), 0,
     "the call count at which the next call is sampled"},
    {NULL},
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cachewatch.capture._fastcall.Counter",
    .tp_basicsize = sizeof(Counter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Calls of one function, and the count at which the next is sampled.",
    .tp_members = counter_members,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ Watched */

typedef struct {
    PyObject_HEAD
    PyObject *jitted;   /* JAX's jitted function */
    PyObject *counter;  /* a Counter (or subclass) */
    PyObject *sampled;  /* sampled(*args, **kwargs): the whole call, in Python */
    PyObject *finish;   /* finish(mark, args, kwargs, exc): record what the call traced */
    PyObject *dict;
    PyObject *weakreflist;
    vectorcallfunc vectorcall;
    /* JAX's jitted function's own vectorcall, read once: calling it directly skips the
     * thread-state lookup and result check of PyObject_Vectorcall on every call (NULL
     * when the callable has none). */
    vectorcallfunc jitted_call;
} Watched;

static int
call_finish(Watched *self, unsigned long long mark, PyObject *const *args,
            size_t nargsf, PyObject *kwnames, PyObject *exc)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *tuple = PyTuple_New(nargs);
    PyObject *kwargs = PyDict_New();
    PyObject *mark_obj = PyLong_FromUnsignedLongLong(mark);
    PyObject *result = NULL;
    if (tuple == NULL || kwargs == NULL || mark_obj == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
            goto done;
        }
    }
    result = PyObject_CallFunctionObjArgs(self->finish, mark_obj, tuple, kwargs,
                                          exc == NULL ? Py_None : exc, NULL);
done:
    Py_XDECREF(tuple);
    Py_XDECREF(kwargs);
    Py_XDECREF(mark_obj);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

static PyObject *
watched_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Watched *self = (Watched *)op;
    Counter *counter = (Counter *)self->counter;
    unsigned long long mark = activity;
    if (++counter->calls >= counter->next_sample) {
        return PyObject_Vectorcall(self->sampled, args, nargsf, kwnames);
    }
    PyObject *out = self->jitted_call != NULL ? self->jitted_call(self->jitted, args, nargsf, kwnames)
                                              : PyObject_Vectorcall(self->jitted, args, nargsf, kwnames);
    if (activity == mark) {
        return out;
    }
    if (out != NULL) {
        if (call_finish(self, mark, args, nargsf, kwnames, NULL) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        return out;
    }
    /* The call raised after tracing: record the trace, then re-raise unchanged. */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    if (call_finish(self, mark, args, nargsf, kwnames, value) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return NULL;
    }
    PyErr_Restore(type, value, traceback);
    return NULL;
}

static PyObject *
watched_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"jitted", "counter", "sampled", "finish", NULL};
    PyObject *jitted, *counter, *sampled, *finish;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OO:Watched", keywords, &jitted,
                                     &CounterType, &counter, &sampled, &finish)) {
        return NULL;
    }
    if (!PyCallable_Check(jitted) || !PyCallable_Check(sampled) || !PyCallable_Check(finish)) {
        PyErr_SetString(PyExc_TypeError, "Watched: jitted, sampled and finish must be callable");
        return NULL;
    }
    Watched *self = (Watched *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->jitted = Py_NewRef(jitted);
    self->counter = Py_NewRef(counter);
    self->sampled = Py_NewRef(sampled);
    self->finish = Py_NewRef(finish);
    self->vectorcall = watched_vectorcall;
    self->jitted_call = PyVectorcall_Function(jitted);
    return (PyObject *)self;
}

static int
watched_traverse(Watched *self, visitproc visit, void *arg)
{
    Py_VISIT(self->jitted);
    Py_VISIT(self->counter);
    Py_VISIT(self->sampled);
    Py_VISIT(self->finish);
    Py_VISIT(self->dict);
    return 0;
}

static int
watched_clear(Watched *self)
{
    Py_CLEAR(self->jitted);
    Py_CLEAR(self->counter);
    Py_CLEAR(self->sampled);
    Py_CLEAR(self->finish);
    Py_CLEAR(self->dict);
    return 0;
}

static void
watched_dealloc(Watched *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    watched_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Bind like a Python function does, so a watched function works as a method. */
static PyObject *
watched_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static PyObject *
watched_repr(Watched *self)
{
    PyObject *name = NULL;
    if (self->dict != NULL) {
        name = PyDict_GetItemString(self->dict, "__qualname__");
    }
    if (name != NULL) {
        return PyUnicode_FromFormat("<cachewatch.jit function %S at %p>", name, self);
    }
    return PyUnicode_FromFormat("<cachewatch.jit function at %p>", self);
}

static PyGetSetDef watched_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject WatchedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cachewatch.capture._fastcall.Watched",
    .tp_basicsize = sizeof(Watched),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A function returned by cachewatch.jit.",
    .tp_new = watched_new,
    .tp_dealloc = (destructor)watched_dealloc,
    .tp_traverse = (traverseproc)watched_traverse,
    .tp_clear = (inquiry)watched_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Watched, vectorcall),
    .tp_descr_get = watched_descr_get,
    .tp_repr = (reprfunc)watched_repr,
    .tp_getset = watched_getset,
    .tp_dictoffset = offsetof(Watched, dict),
    .tp_weaklistoffset = offsetof(Watched, weakreflist),
};

/* ------------------------------------------------------------------ module */

static PyObject *
fastcall_bump(PyObject *module, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(++activity);
}

static PyObject *
fastcall_activity(PyObject *module, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(activity);
}

/* /proc/self files read and written holding the GIL (cachewatch/capture/cachestate.py): the
 * kernel answers in microseconds, while os.pread and os.write let go of the GIL, and on a
 * compiling thread that hands it to cachewatch's writer for up to its switch interval. */
static PyObject *
fastcall_pread(PyObject *module, PyObject *args)
{
    int fd;
    Py_ssize_t size;
    long long offset;
    if (!PyArg_ParseTuple(args, "inL:pread", &fd, &size, &offset)) {
        return NULL;
    }
    if (size < 0 || size > 65536) {
        PyErr_SetString(PyExc_ValueError, "pread: size must be 0 to 65536 bytes");
        return NULL;
    }
    PyObject *buffer = PyBytes_FromStringAndSize(NULL, size);
    if (buffer == NULL) {
        return NULL;
    }
    ssize_t got = pread(fd, PyBytes_AS_STRING(buffer), (size_t)size, (off_t)offset);
    if (got < 0) {
        Py_DECREF(buffer);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (_PyBytes_Resize(&buffer, got) < 0) {
        return NULL;
    }
    return buffer;
}

static PyObject *
fastcall_write(PyObject *module, PyObject *args)
{
    int fd;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*:write", &fd, &data)) {
        return NULL;
    }
    ssize_t wrote = write(fd, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    if (wrote < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(wrote);
}

static PyMethodDef fastcall_methods[] = {
    {"bump", fastcall_bump, METH_NOARGS,
     "Advance the activity counter and return its new value (call with cachewatch's lock held)."},
    {"activity", fastcall_activity, METH_NOARGS, "The activity counter."},
    {"pread", fastcall_pread, METH_VARARGS, "os.pread(fd, size, offset), holding the GIL (for /proc files)."},
    {"write", fastcall_write, METH_VARARGS, "os.write(fd, data), holding the GIL (for /proc files)."},
    {NULL},
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cachewatch.capture._fastcall",
    .m_doc = "The cache-hit path of cachewatch.jit, in C.",
    .m_size = -1,
    .m_methods = fastcall_methods,
};

PyMODINIT_FUNC
PyInit__fastcall(void)
{
    if (PyType_Ready(&CounterType) < 0 || PyType_Ready(&WatchedType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fastcall_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Counter", (PyObject *)&CounterType) < 0
        || PyModule_AddObjectRef(module, "Watched", (PyObject *)&WatchedType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
