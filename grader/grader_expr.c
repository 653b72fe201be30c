/* grader_expr.c - the multi grader's calculate_output: an arithmetic formula over sub-grader rewards.
 *
 * Grammar (a recursive-descent parser; nothing is ever evaluated as code):
 *
 *   expr    := term (('+' | '-') term)*
 *   term    := unary (('*' | '/') unary)*
 *   unary   := ('+' | '-') unary | primary
 *   primary := number | name | name '(' expr (',' expr)* ')' | '(' expr ')'
 *
 * Names are the sub-graders' keys; functions are min and max (one or more arguments) and abs, sqrt,
 * log (natural), exp, floor, ceil (one). The AST is a flat array of nodes built bottom-up, children
 * by index, so freeing it is two free() calls. Nesting is bounded (EXPR_DEPTH_MAX) so that neither
 * parsing nor evaluation can run the stack out. Evaluation fails, rather than answering inf or NaN,
 * on division by zero, the log of a non-positive number, the square root of a negative one, and
 * any result that is not finite. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grader.h"

#define EXPR_DEPTH_MAX 64
#define EXPR_TEXT_MAX 4096

enum expr_op { EXPR_NUM, EXPR_VAR, EXPR_NEG, EXPR_ADD, EXPR_SUB, EXPR_MUL, EXPR_DIV, EXPR_CALL };
enum expr_fn { FN_MIN, FN_MAX, FN_ABS, FN_SQRT, FN_LOG, FN_EXP, FN_FLOOR, FN_CEIL };

static const struct {
    const char *name;
    enum expr_fn fn;
    int variadic; /* min/max: one or more arguments; the others exactly one */
} functions[] = {
    {"min", FN_MIN, 1}, {"max", FN_MAX, 1}, {"abs", FN_ABS, 0}, {"sqrt", FN_SQRT, 0},
    {"log", FN_LOG, 0}, {"exp", FN_EXP, 0}, {"floor", FN_FLOOR, 0}, {"ceil", FN_CEIL, 0},
};

struct expr_node {
    enum expr_op op;
    double number;       /* EXPR_NUM */
    size_t var;          /* EXPR_VAR: index into the values */
    enum expr_fn fn;     /* EXPR_CALL */
    size_t lhs, rhs;     /* binary operators; EXPR_NEG uses lhs */
    size_t first, count; /* EXPR_CALL: its arguments are args[first .. first + count) */
};

struct grader_expr {
    struct expr_node *nodes;
    size_t n_nodes, cap_nodes;
    size_t *args;
    size_t n_args, cap_args;
    size_t root;
};

struct parser {
    const char *text, *p;
    const char *const *names;
    size_t n_names;
    struct grader_expr *e;
    int depth;
    struct whet_err *err;
};

static int fail(struct parser *ps, const char *what) {
    return whet_errf(ps->err, "at character %zu: %s", (size_t)(ps->p - ps->text) + 1, what);
}

static size_t node_add(struct grader_expr *e, struct expr_node node) {
    if (e->n_nodes == e->cap_nodes) {
        e->cap_nodes = e->cap_nodes ? e->cap_nodes * 2 : 16;
        e->nodes = xrealloc(e->nodes, e->cap_nodes * sizeof *e->nodes);
    }
    e->nodes[e->n_nodes] = node;
    return e->n_nodes++;
}

static void skip_space(struct parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_expr(struct parser *ps, size_t *out);

/* A number: digits, an optional fraction, an optional exponent (no inf, nan or hex, which strtod
 * would take). */
static int parse_number(struct parser *ps, size_t *out) {
    const char *start = ps->p, *q = ps->p;
    while (is_digit(*q)) q++;
    if (*q == '.') {
        q++;
        while (is_digit(*q)) q++;
    }
    if (q == start + 1 && *start == '.') return fail(ps, "expected a digit after '.'");
    if (*q == 'e' || *q == 'E') {
        const char *exp = q + 1;
        if (*exp == '+' || *exp == '-') exp++;
        if (!is_digit(*exp)) return fail(ps, "expected digits in the exponent");
        while (is_digit(*exp)) exp++;
        q = exp;
    }
    char buf[128];
    size_t len = (size_t)(q - start);
    if (len >= sizeof buf) return fail(ps, "number too long");
    memcpy(buf, start, len);
    buf[len] = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v)) return fail(ps, "number out of range");
    ps->p = q;
    *out = node_add(ps->e, (struct expr_node){.op = EXPR_NUM, .number = v});
    return 0;
}

static int parse_call(struct parser *ps, const char *name, size_t len, size_t *out) {
    size_t f = 0;
    while (f < WHET_ARRAY_LEN(functions) && !(strlen(functions[f].name) == len && memcmp(functions[f].name, name, len) == 0))
        f++;
    if (f == WHET_ARRAY_LEN(functions))
        return fail(ps, "unknown function (expected min, max, abs, sqrt, log, exp, floor or ceil)");
    ps->p++; /* '(' */
    size_t *found = NULL, n = 0, cap = 0; /* arguments collect here: nested calls add their own first */
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            found = xrealloc(found, cap * sizeof *found);
        }
        if (parse_expr(ps, &found[n])) {
            free(found);
            return -1;
        }
        n++;
        skip_space(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p != ')') {
            free(found);
            return fail(ps, "expected ',' or ')'");
        }
        ps->p++;
        break;
    }
    if (!functions[f].variadic && n != 1) {
        free(found);
        return fail(ps, "this function takes exactly one argument");
    }
    struct grader_expr *e = ps->e;
    if (e->n_args + n > e->cap_args) {
        e->cap_args = (e->n_args + n) * 2;
        e->args = xrealloc(e->args, e->cap_args * sizeof *e->args);
    }
    memcpy(e->args + e->n_args, found, n * sizeof *found);
    *out = node_add(e, (struct expr_node){.op = EXPR_CALL, .fn = functions[f].fn, .first = e->n_args, .count = n});
    e->n_args += n;
    free(found);
    return 0;
}

static int parse_primary(struct parser *ps, size_t *out) {
    skip_space(ps);
    char c = *ps->p;
    if (is_digit(c) || c == '.') return parse_number(ps, out);
    if (c == '(') {
        ps->p++;
        if (parse_expr(ps, out)) return -1;
        skip_space(ps);
        if (*ps->p != ')') return fail(ps, "expected ')'");
        ps->p++;
        return 0;
    }
    if (is_name_start(c)) {
        const char *name = ps->p;
        while (is_name_char(*ps->p)) ps->p++;
        size_t len = (size_t)(ps->p - name);
        skip_space(ps);
        if (*ps->p == '(') return parse_call(ps, name, len, out);
        for (size_t k = 0; k < ps->n_names; k++) {
            if (strlen(ps->names[k]) == len && memcmp(ps->names[k], name, len) == 0) {
                *out = node_add(ps->e, (struct expr_node){.op = EXPR_VAR, .var = k});
                return 0;
            }
        }
        ps->p = name;
        char what[160];
        snprintf(what, sizeof what, "unknown name \"%.*s\" (not one of the graders)", (int)(len < 64 ? len : 64), name);
        return fail(ps, what);
    }
    if (c == 0) return fail(ps, "unexpected end of the formula");
    return fail(ps, "expected a number, a grader name, a function or '('");
}

static int parse_unary(struct parser *ps, size_t *out) {
    skip_space(ps);
    if (*ps->p == '+' || *ps->p == '-') {
        int negate = *ps->p == '-';
        ps->p++;
        if (++ps->depth > EXPR_DEPTH_MAX) return fail(ps, "formula nested too deeply");
        size_t operand;
        if (parse_unary(ps, &operand)) return -1;
        ps->depth--;
        *out = negate ? node_add(ps->e, (struct expr_node){.op = EXPR_NEG, .lhs = operand}) : operand;
        return 0;
    }
    return parse_primary(ps, out);
}

static int parse_term(struct parser *ps, size_t *out) {
    size_t lhs;
    if (parse_unary(ps, &lhs)) return -1;
    for (;;) {
        skip_space(ps);
        char c = *ps->p;
        if (c != '*' && c != '/') break;
        ps->p++;
        size_t rhs;
        if (parse_unary(ps, &rhs)) return -1;
        lhs = node_add(ps->e, (struct expr_node){.op = c == '*' ? EXPR_MUL : EXPR_DIV, .lhs = lhs, .rhs = rhs});
    }
    *out = lhs;
    return 0;
}

static int parse_expr(struct parser *ps, size_t *out) {
    if (++ps->depth > EXPR_DEPTH_MAX) return fail(ps, "formula nested too deeply");
    size_t lhs;
    if (parse_term(ps, &lhs)) return -1;
    for (;;) {
        skip_space(ps);
        char c = *ps->p;
        if (c != '+' && c != '-') break;
        ps->p++;
        size_t rhs;
        if (parse_term(ps, &rhs)) return -1;
        lhs = node_add(ps->e, (struct expr_node){.op = c == '+' ? EXPR_ADD : EXPR_SUB, .lhs = lhs, .rhs = rhs});
    }
    ps->depth--;
    *out = lhs;
    return 0;
}

int grader_expr_parse(const char *text, const char *const *names, size_t n_names, struct grader_expr **out,
                      struct whet_err *err) {
    *out = NULL;
    if (strlen(text) > EXPR_TEXT_MAX) return whet_errf(err, "formula longer than %d characters", EXPR_TEXT_MAX);
    struct grader_expr *e = xcalloc(1, sizeof *e);
    struct parser ps = {.text = text, .p = text, .names = names, .n_names = n_names, .e = e, .err = err};
    if (parse_expr(&ps, &e->root) == 0) {
        skip_space(&ps);
        if (*ps.p == 0) {
            *out = e;
            return 0;
        }
        fail(&ps, "unexpected text after the formula");
    }
    grader_expr_free(e);
    return -1;
}

void grader_expr_free(struct grader_expr *e) {
    if (!e) return;
    free(e->nodes);
    free(e->args);
    free(e);
}

static int eval_node(const struct grader_expr *e, size_t i, const double *values, double *out, struct whet_err *err) {
    const struct expr_node *n = &e->nodes[i];
    double a, b;
    switch (n->op) {
    case EXPR_NUM: *out = n->number; return 0;
    case EXPR_VAR: *out = values[n->var]; return 0;
    case EXPR_NEG:
        if (eval_node(e, n->lhs, values, &a, err)) return -1;
        *out = -a;
        return 0;
    case EXPR_ADD:
    case EXPR_SUB:
    case EXPR_MUL:
    case EXPR_DIV:
        if (eval_node(e, n->lhs, values, &a, err) || eval_node(e, n->rhs, values, &b, err)) return -1;
        if (n->op == EXPR_DIV && b == 0) return whet_errf(err, "division by zero");
        *out = n->op == EXPR_ADD ? a + b : n->op == EXPR_SUB ? a - b : n->op == EXPR_MUL ? a * b : a / b;
        return 0;
    case EXPR_CALL:
        if (eval_node(e, e->args[n->first], values, &a, err)) return -1;
        for (size_t k = 1; k < n->count; k++) { /* only min and max have more than one argument */
            if (eval_node(e, e->args[n->first + k], values, &b, err)) return -1;
            a = n->fn == FN_MIN ? fmin(a, b) : fmax(a, b);
        }
        switch (n->fn) {
        case FN_MIN:
        case FN_MAX: *out = a; return 0;
        case FN_ABS: *out = fabs(a); return 0;
        case FN_SQRT:
            if (a < 0) return whet_errf(err, "square root of a negative number");
            *out = sqrt(a);
            return 0;
        case FN_LOG:
            if (a <= 0) return whet_errf(err, "log of a non-positive number");
            *out = log(a);
            return 0;
        case FN_EXP: *out = exp(a); return 0;
        case FN_FLOOR: *out = floor(a); return 0;
        case FN_CEIL: *out = ceil(a); return 0;
        }
    }
    return whet_errf(err, "bad formula node");
}

int grader_expr_eval(const struct grader_expr *e, const double *values, double *out, struct whet_err *err) {
    double v;
    if (eval_node(e, e->root, values, &v, err)) return -1;
    if (!isfinite(v)) return whet_errf(err, "the formula's value is not finite");
    *out = v;
    return 0;
}
