/* test_files.c - safetensors and config.json: round trips, and every kind of bad file giving an
 * error that names the file and the problem (never a crash). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_config.h"
#include "safetensors.h"
#include "test.h"

/* A safetensors image: 8-byte length, the header text, then `data_len` bytes of data. */
static uint8_t *image(const char *header, uint64_t claimed_len, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *buf = xcalloc(*len, 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(claimed_len >> (8 * i));
    memcpy(buf + 8, header, h);
    return buf;
}

/* Parses the image; returns the error message (static) or NULL on success. */
static const char *parse_error(const char *header, int64_t claimed, size_t data_len) {
    static struct whet_err err;
    size_t len;
    uint8_t *buf = image(header, claimed < 0 ? strlen(header) : (uint64_t)claimed, data_len, &len);
    struct st_set set;
    int rc = st_parse(&set, buf, len, "bad.safetensors", &err);
    if (!rc) st_close(&set);
    free(buf);
    return rc ? err.msg : NULL;
}

TEST(safetensors_bad_headers) {
    struct whet_err err;
    struct st_set set;
    CHECK(st_parse(&set, (const uint8_t *)"abc", 3, "short.safetensors", &err) == -1);
    CHECK_CONTAINS(err.msg, "short.safetensors");
    CHECK_CONTAINS(err.msg, "too short");
    const char *e;
    e = parse_error("{}", 1000, 0);
    CHECK_CONTAINS(e, "bad.safetensors: header length 1000 runs past the end of the file");
    e = parse_error("{}", 200u * 1024 * 1024, 0);
    CHECK_CONTAINS(e, "over the 100 MB limit");
    e = parse_error("{\"a\": {\"dtype\": \"F32\"", -1, 0);
    CHECK_CONTAINS(e, "not valid JSON");
    e = parse_error("[1, 2]", -1, 0);
    CHECK_CONTAINS(e, "expected a JSON object");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 12);
    CHECK_CONTAINS(e, "overlap");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 4);
    CHECK_CONTAINS(e, "tensor \"a\": data_offsets end 8 is past the end of the data (4 bytes)");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8);
    CHECK_CONTAINS(e, "F32 shape holds 12 bytes but data_offsets span 8");
    e = parse_error("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", -1, 8);
    CHECK_CONTAINS(e, "BF16 shape holds 8 bytes");
    e = parse_error("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,2]}}", -1, 8);
    CHECK_CONTAINS(e, "unknown dtype \"Q4\"");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", -1, 8);
    CHECK_CONTAINS(e, "shape[0]");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", -1, 8);
    CHECK_CONTAINS(e, "not an ordered pair");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[9999999999,9999999999,9999999999],\"data_offsets\":[0,4]}}", -1, 8);
    CHECK_CONTAINS(e, "absurdly large");
    e = parse_error("{\"__metadata__\":{\"k\":1}}", -1, 0);
    CHECK_CONTAINS(e, "__metadata__.k: expected a string");
    e = parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}", -1, 8);
    CHECK(e != NULL); /* duplicate names */
    /* A good one. */
    e = parse_error("{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", -1, 8);
    CHECK(e == NULL);
}

static char *tmpdir(void) {
    char tmpl[] = "/tmp/whet-st-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? xstrdup(d) : NULL;
}

static void rmrf(const char *d) {
    char *cmd = xasprintf("rm -rf '%s'", d);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", d);
    free(cmd);
}

TEST(safetensors_round_trip) {
    char *d = tmpdir();
    struct whet_err err;
    float a[6] = {1.0f, -2.5f, 3.14159f, 0.0f, 1e-3f, 65504.0f}, b[3] = {7, 8, 9};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    struct st_writer w;
    st_writer_init(&w);
    st_writer_metadata(&w, "format", "pt");
    st_writer_add(&w, "layer.\"quoted\".weight", 2, sa, a);
    st_writer_add(&w, "b", 1, sb, b);
    char *f32 = xasprintf("%s/f32.safetensors", d), *bf = xasprintf("%s/bf16.safetensors", d);
    CHECK(st_writer_write(&w, f32, ST_F32, &err) == 0);
    CHECK(st_writer_write(&w, bf, ST_BF16, &err) == 0);
    st_writer_free(&w);
    struct st_set s;
    CHECK_MSG(st_open_file(&s, f32, &err) == 0, "%s", err.msg);
    CHECK(s.n_tensors == 2);
    CHECK_STR(st_metadata(&s, "format"), "pt");
    const struct st_tensor *t = st_find(&s, "layer.\"quoted\".weight");
    CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->dtype == ST_F32);
    float out[6];
    CHECK(t && st_read_f32(t, out, 6, &err) == 0 && memcmp(out, a, sizeof a) == 0);
    CHECK(t && st_read_f32(t, out, 5, &err) == -1);
    CHECK_CONTAINS(err.msg, "expected 5");
    st_close(&s);
    CHECK(st_open_file(&s, bf, &err) == 0);
    t = st_find(&s, "layer.\"quoted\".weight");
    CHECK(t && t->dtype == ST_BF16 && st_read_f32(t, out, 6, &err) == 0);
    for (int i = 0; i < 6; i++) CHECK_NEAR(out[i], a[i], fabs(a[i]) / 128 + 1e-30);
    CHECK(out[0] == 1.0f && out[1] == -2.5f);
    st_close(&s);
    /* f16 conversion: 1.0, -2.0, 65504 (max), a subnormal. */
    CHECK(st_f16_to_f32(0x3c00) == 1.0f);
    CHECK(st_f16_to_f32(0xc000) == -2.0f);
    CHECK(st_f16_to_f32(0x7bff) == 65504.0f);
    CHECK_NEAR(st_f16_to_f32(0x0001), 5.960464477539063e-08, 1e-15);
    CHECK(st_bf16_to_f32(st_f32_to_bf16(3.0f)) == 3.0f);

    /* Shards: two files and an index; then an index that lies about where a tensor is. */
    char *s1 = xasprintf("%s/model-00001-of-00002.safetensors", d), *s2 = xasprintf("%s/model-00002-of-00002.safetensors", d);
    st_writer_init(&w);
    st_writer_add(&w, "x", 1, sb, b);
    CHECK(st_writer_write(&w, s1, ST_F32, &err) == 0);
    st_writer_free(&w);
    st_writer_init(&w);
    st_writer_add(&w, "y", 2, sa, a);
    CHECK(st_writer_write(&w, s2, ST_BF16, &err) == 0);
    st_writer_free(&w);
    char *idx = xasprintf("%s/model.safetensors.index.json", d);
    const char *good = "{\"metadata\":{},\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                       "\"y\":\"model-00002-of-00002.safetensors\"}}";
    CHECK(whet_write_file_atomic(idx, good, strlen(good), &err) == 0);
    CHECK_MSG(st_open_dir(&s, d, &err) == 0, "%s", err.msg);
    CHECK(s.n_tensors == 2 && st_find(&s, "x") && st_find(&s, "y") && s.n_files == 2);
    const struct st_tensor *ty;
    int64_t want[2] = {2, 3}, wrong[2] = {3, 2};
    CHECK(st_expect(&s, "y", 2, want, &ty, &err) == 0);
    CHECK(st_expect(&s, "y", 2, wrong, &ty, &err) == -1);
    CHECK_CONTAINS(err.msg, "shape [2, 3], the config implies [3, 2]");
    CHECK(st_expect(&s, "z", 1, sb, &ty, &err) == -1);
    CHECK_CONTAINS(err.msg, "\"z\" is missing");
    st_close(&s);
    const char *liar = "{\"weight_map\":{\"x\":\"model-00002-of-00002.safetensors\","
                       "\"y\":\"model-00002-of-00002.safetensors\"}}";
    CHECK(whet_write_file_atomic(idx, liar, strlen(liar), &err) == 0);
    CHECK(st_open_dir(&s, d, &err) == -1);
    CHECK_CONTAINS(err.msg, "weight_map names \"x\"");
    const char *escape = "{\"weight_map\":{\"x\":\"../etc/passwd\"}}";
    CHECK(whet_write_file_atomic(idx, escape, strlen(escape), &err) == 0);
    CHECK(st_open_dir(&s, d, &err) == -1);
    CHECK_CONTAINS(err.msg, "same directory");
    /* A truncated shard names the shard. */
    CHECK(whet_write_file_atomic(idx, good, strlen(good), &err) == 0);
    CHECK(truncate(s2, 20) == 0);
    CHECK(st_open_dir(&s, d, &err) == -1);
    CHECK_CONTAINS(err.msg, "model-00002-of-00002.safetensors");
    unlink(idx);
    CHECK(st_open_dir(&s, d, &err) == -1);
    CHECK_CONTAINS(err.msg, "no model.safetensors");
    rmrf(d);
    free(d), free(f32), free(bf), free(s1), free(s2), free(idx);
}

static const char *config_error(const char *json) {
    static struct whet_err err;
    struct model_config c;
    return model_config_parse(&c, json, "config.json", &err) ? err.msg : NULL;
}

#define BASE "\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"

TEST(config_good) {
    struct model_config c;
    struct whet_err err;
    const char *qwen3 = "{\"architectures\":[\"Qwen3ForCausalLM\"]," BASE "\"num_attention_heads\":4,"
                        "\"num_key_value_heads\":2,\"head_dim\":32,\"rope_theta\":1000000,\"tie_word_embeddings\":true,"
                        "\"eos_token_id\":[7,8],\"sliding_window\":null,\"use_sliding_window\":false}";
    CHECK_MSG(model_config_parse(&c, qwen3, "config.json", &err) == 0, "%s", err.msg);
    CHECK(c.arch == ARCH_QWEN3 && c.qk_norm && !c.qkv_bias && c.head_dim == 32 && c.n_kv_heads == 2);
    CHECK(c.tie_word_embeddings && c.eos_token_id == 7 && c.bos_token_id == -1);
    CHECK_NEAR(c.rope_theta, 1e6, 1e-3);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
    /* The emitted config parses back to the same numbers. */
    char *text = model_config_to_json(&c, "float32");
    struct model_config c2;
    CHECK(model_config_parse(&c2, text, "out.json", &err) == 0);
    CHECK(c2.arch == c.arch && c2.head_dim == c.head_dim && c2.tie_word_embeddings && c2.rope_theta == c.rope_theta);
    CHECK(model_config_num_params(&c2) == model_config_num_params(&c));
    free(text);
    const char *qwen2 = "{\"model_type\":\"qwen2\"," BASE "\"num_attention_heads\":4}";
    CHECK(model_config_parse(&c, qwen2, "config.json", &err) == 0);
    CHECK(c.arch == ARCH_QWEN2 && c.qkv_bias && c.head_dim == 16 && c.n_kv_heads == 4 && !c.tie_word_embeddings);
    const char *mistral = "{\"architectures\":[\"MistralForCausalLM\"]," BASE "\"num_attention_heads\":4,"
                          "\"max_position_embeddings\":4096,\"sliding_window\":4096}";
    CHECK(model_config_parse(&c, mistral, "config.json", &err) == 0);
    CHECK(c.arch == ARCH_MISTRAL && c.sliding_window == 0); /* a window as long as the context never applies */
    const char *llama3 = "{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,"
                         "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":32.0,\"low_freq_factor\":1.0,"
                         "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}}";
    CHECK(model_config_parse(&c, llama3, "config.json", &err) == 0);
    CHECK(c.rope_scaling == 2 && c.rope_factor == 32.0f && c.rope_original_max_pos == 8192);
}

TEST(config_bad) {
    const char *e;
    e = config_error("{\"architectures\":[\"GPT2LMHeadModel\"]," BASE "\"num_attention_heads\":4}");
    CHECK_CONTAINS(e, "config.json: architecture \"GPT2LMHeadModel\" is not supported");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":100}");
    CHECK_CONTAINS(e, "config.json: hidden_size: missing");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":0}");
    CHECK_CONTAINS(e, "num_attention_heads: 0 is out of range");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,\"num_key_value_heads\":3}");
    CHECK_CONTAINS(e, "num_key_value_heads: 3 does not divide");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":6}");
    CHECK_CONTAINS(e, "does not divide hidden_size");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,\"rms_norm_eps\":-1}");
    CHECK_CONTAINS(e, "rms_norm_eps");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,\"hidden_size\":\"big\"}");
    CHECK(e != NULL); /* duplicate key is read as the later one or rejected: either way not a crash */
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":-5}");
    CHECK_CONTAINS(e, "vocab_size: -5 is out of range");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,\"head_dim\":7}");
    CHECK_CONTAINS(e, "head_dim: 7 is odd");
    e = config_error("{\"architectures\":[\"MistralForCausalLM\"]," BASE "\"num_attention_heads\":4,"
                     "\"max_position_embeddings\":32768,\"sliding_window\":4096}");
    CHECK(e == NULL); /* accepted; the model refuses sequences longer than the window */
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,"
                     "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}");
    CHECK_CONTAINS(e, "rope_type \"yarn\" is not supported");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,\"hidden_act\":\"gelu\"}");
    CHECK_CONTAINS(e, "hidden_act");
    e = config_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "\"num_attention_heads\":4,\"attention_bias\":true}");
    CHECK_CONTAINS(e, "o_proj bias");
    e = config_error("{\"architectures\": [\"LlamaForCausalLM\"],\n \"vocab_size\": 100,,}");
    CHECK_CONTAINS(e, "config.json: line 2");
    e = config_error("{}");
    CHECK_CONTAINS(e, "architectures: missing");
}

int main(void) {
    RUN(safetensors_bad_headers);
    RUN(safetensors_round_trip);
    RUN(config_good);
    RUN(config_bad);
    return test_summary();
}
