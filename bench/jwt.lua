-- The OpenResty peer's JWT check, as Kong's and APISIX's jwt plugins do it:
-- every request decodes the token (base64url, cjson), checks `alg` and
-- `exp`, and verifies the signature through OpenSSL's libcrypto from
-- LuaJIT's FFI (HMAC for HS256, EVP_DigestVerify for RS256). No cache of
-- verified tokens. `jwt.verify(token)` returns the claims or nil, reason.
local ffi = require "ffi"
local cjson = require "cjson.safe"
local b64 = require "ngx.base64"

ffi.cdef [[
typedef struct evp_md_st EVP_MD;
typedef struct evp_md_ctx_st EVP_MD_CTX;
typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_pkey_ctx_st EVP_PKEY_CTX;
typedef struct bio_st BIO;
typedef struct engine_st ENGINE;
const EVP_MD *EVP_sha256(void);
unsigned char *HMAC(const EVP_MD *md, const void *key, int key_len,
                    const unsigned char *d, size_t n, unsigned char *out,
                    unsigned int *out_len);
int CRYPTO_memcmp(const void *a, const void *b, size_t len);
BIO *BIO_new_mem_buf(const void *buf, int len);
int BIO_free(BIO *a);
EVP_PKEY *PEM_read_bio_PUBKEY(BIO *bp, EVP_PKEY **x, void *cb, void *u);
EVP_MD_CTX *EVP_MD_CTX_new(void);
void EVP_MD_CTX_free(EVP_MD_CTX *ctx);
int EVP_DigestVerifyInit(EVP_MD_CTX *ctx, EVP_PKEY_CTX **pctx, const EVP_MD *type,
                         ENGINE *e, EVP_PKEY *pkey);
int EVP_DigestVerify(EVP_MD_CTX *ctx, const unsigned char *sig, size_t siglen,
                     const unsigned char *tbs, size_t tbslen);
]]

local crypto = ffi.load("crypto")
local sha256 = crypto.EVP_sha256()
local mac = ffi.new("unsigned char[32]")
local mac_len = ffi.new("unsigned int[1]")

local _M = {}
local secret, rsa_key

-- Called once per worker (init_worker): the HS256 secret and the RS256
-- public key in PEM.
function _M.setup(hs256_secret, rs256_pem)
  secret = hs256_secret
  local bio = crypto.BIO_new_mem_buf(rs256_pem, #rs256_pem)
  rsa_key = crypto.PEM_read_bio_PUBKEY(bio, nil, nil, nil)
  crypto.BIO_free(bio)
  assert(rsa_key ~= nil, "RS256 public key")
end

local function hs256(input, sig)
  crypto.HMAC(sha256, secret, #secret, input, #input, mac, mac_len)
  return #sig == 32 and crypto.CRYPTO_memcmp(mac, sig, 32) == 0
end

local function rs256(input, sig)
  local ctx = crypto.EVP_MD_CTX_new()
  local ok = crypto.EVP_DigestVerifyInit(ctx, nil, sha256, nil, rsa_key) == 1
    and crypto.EVP_DigestVerify(ctx, sig, #sig, input, #input) == 1
  crypto.EVP_MD_CTX_free(ctx)
  return ok
end

local VERIFY = { HS256 = hs256, RS256 = rs256 }

function _M.verify(token)
  local h, p, s = token:match("^([%w_-]+)%.([%w_-]+)%.([%w_-]+)$")
  if not h then return nil, "malformed" end
  local header = cjson.decode(b64.decode_base64url(h) or "")
  local check = header and VERIFY[header.alg]
  if not check then return nil, "algorithm" end
  local sig = b64.decode_base64url(s)
  if not sig or not check(h .. "." .. p, sig) then return nil, "signature" end
  local claims = cjson.decode(b64.decode_base64url(p) or "")
  if type(claims) ~= "table" or type(claims.exp) ~= "number" or claims.exp <= ngx.time() then
    return nil, "expired"
  end
  return claims
end

return _M
