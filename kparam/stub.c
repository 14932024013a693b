/* Last resort before opaque: read the x86-64 machine code of an nvcc host launch stub and count
 * the slots it stores into its `void *args[]` array. A slot holds the address of a stack home of
 * one parameter; the size of the store that filled that home is the parameter's size. */
#include "internal.h"

#include <capstone/capstone.h>
#include <errno.h>
#include <string.h>

#define MAX_INSTRUCTIONS 600
#define CODE_WINDOW 4096 /* bytes disassembled from a function start */
#define MAX_HOMES 256

struct analysis {
  const void *host_fun;
  /* Stack homes written so far: displacement from the frame base and store size. */
  int64_t home_disp[MAX_HOMES];
  uint32_t home_size[MAX_HOMES];
  size_t home_count;
  /* Registers currently holding the address of a stack home (capstone register ids). */
  int64_t reg_disp[X86_REG_ENDING];
  bool reg_valid[X86_REG_ENDING];
  uint32_t *sizes;
  size_t max, slots;
  bool finished, unknown_size;
  uint64_t first_call; /* target of the first direct call or jmp */
};

static bool frame_base(x86_reg reg) { return reg == X86_REG_RBP || reg == X86_REG_RSP; }

static uint32_t home_size_at(const struct analysis *a, int64_t disp) {
  for (size_t i = a->home_count; i-- > 0;)
    if (a->home_disp[i] == disp) return a->home_size[i];
  return 0;
}

/* Process one instruction; false stops the scan. */
static bool step(struct analysis *a, const cs_insn *insn) {
  const cs_x86 *x = &insn->detail->x86;
  if (insn->id == X86_INS_RET) return false;
  if (insn->id == X86_INS_CALL || insn->id == X86_INS_JMP) {
    if (!a->first_call && x->op_count == 1 && x->operands[0].type == X86_OP_IMM)
      a->first_call = (uint64_t)x->operands[0].imm;
    a->reg_valid[X86_REG_RAX] = false; /* a call result: an address we cannot size */
    if (insn->id == X86_INS_JMP && x->op_count == 1 && x->operands[0].type == X86_OP_IMM &&
        a->slots == 0)
      return false; /* a tail jump before any slot: follow it instead */
    return true;
  }
  if (insn->id == X86_INS_LEA && x->op_count == 2 && x->operands[0].type == X86_OP_REG) {
    const cs_x86_op *mem = &x->operands[1];
    x86_reg dst = x->operands[0].reg;
    if (mem->mem.base == X86_REG_RIP &&
        (uint64_t)(insn->address + insn->size + mem->mem.disp) == (uint64_t)(uintptr_t)a->host_fun) {
      a->finished = a->slots > 0; /* the stub takes its kernel's address after the slots */
      return !a->finished;
    }
    if (dst < X86_REG_ENDING) {
      a->reg_valid[dst] = frame_base(mem->mem.base) && mem->mem.index == X86_REG_INVALID;
      a->reg_disp[dst] = mem->mem.disp;
    }
    return true;
  }
  bool is_store = (insn->id == X86_INS_MOV || insn->id == X86_INS_MOVSS ||
                   insn->id == X86_INS_MOVSD || insn->id == X86_INS_MOVQ ||
                   insn->id == X86_INS_MOVD || insn->id == X86_INS_MOVAPS ||
                   insn->id == X86_INS_MOVUPS || insn->id == X86_INS_MOVDQA ||
                   insn->id == X86_INS_MOVDQU) &&
                  x->op_count == 2 && x->operands[0].type == X86_OP_MEM &&
                  frame_base(x->operands[0].mem.base);
  if (is_store) {
    const cs_x86_op *dst = &x->operands[0], *src = &x->operands[1];
    if (src->type == X86_OP_REG && src->reg < X86_REG_ENDING && dst->size == 8 &&
        (a->reg_valid[src->reg] || src->reg == X86_REG_RAX) &&
        (dst->mem.index != X86_REG_INVALID ? dst->mem.scale == 8 : true)) {
      if (!a->reg_valid[src->reg]) {
        if (src->reg == X86_REG_RAX && a->slots == 0 && dst->mem.index == X86_REG_INVALID)
          goto home; /* rax spilled, not an address */
        a->unknown_size = true;
      } else {
        uint32_t size = home_size_at(a, a->reg_disp[src->reg]);
        if (!size) goto home; /* an address, but not of a parameter home */
        if (a->slots < a->max) a->sizes[a->slots] = size;
      }
      a->slots++;
      return true;
    }
  home:
    if (dst->mem.index == X86_REG_INVALID && a->home_count < MAX_HOMES && dst->size) {
      a->home_disp[a->home_count] = dst->mem.disp;
      a->home_size[a->home_count++] = dst->size;
    }
    return true;
  }
  /* Any other write to a register ends what we knew about it. */
  if (x->op_count >= 1 && x->operands[0].type == X86_OP_REG && x->operands[0].reg < X86_REG_ENDING)
    a->reg_valid[x->operands[0].reg] = false;
  return true;
}

static int analyse(csh handle, const void *code, struct analysis *a) {
  cs_insn *insn = cs_malloc(handle);
  if (!insn) return -ENOMEM;
  const uint8_t *p = code;
  size_t size = CODE_WINDOW;
  uint64_t address = (uint64_t)(uintptr_t)code;
  for (int n = 0; n < MAX_INSTRUCTIONS && cs_disasm_iter(handle, &p, &size, &address, insn); n++)
    if (!step(a, insn) || a->finished) break;
  cs_free(insn, 1);
  return 0;
}

int kparam_stub_arg_sizes(const void *host_fun, uint32_t *sizes, size_t max) {
  if (!host_fun) return -EINVAL;
  csh handle;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &handle) != CS_ERR_OK) return -ENOMEM;
  cs_option(handle, CS_OPT_DETAIL, CS_OPT_ON);
  static struct analysis zero;
  struct analysis a = zero;
  a.host_fun = host_fun;
  a.sizes = sizes;
  a.max = max;
  int rc = analyse(handle, host_fun, &a);
  if (rc == 0 && !a.finished && a.first_call) { /* host_fun just calls the stub: follow it */
    const void *stub = (const void *)(uintptr_t)a.first_call;
    a = zero;
    a.host_fun = host_fun;
    a.sizes = sizes;
    a.max = max;
    rc = analyse(handle, stub, &a);
  }
  cs_close(&handle);
  if (rc) return rc;
  if (!a.finished || a.unknown_size || a.slots > max) return -ENOENT;
  return (int)a.slots;
}
