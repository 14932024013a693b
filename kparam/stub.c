/* Last resort before opaque: read the x86-64 machine code of an nvcc host launch stub and count
 * the slots it stores into its `void *args[]` array. A slot holds the address of a stack home of
 * one parameter; the size of the store that filled that home is the parameter's size. */
#include "internal.h"

#include <capstone/capstone.h>
#include <errno.h>
#include <stdlib.h>
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
  /* Registers holding the address of a stack home (general registers, and the two 8-byte
   * lanes of xmm registers that -O2 code uses to store two slots at once). */
  int64_t reg_disp[X86_REG_ENDING][2];
  bool reg_valid[X86_REG_ENDING][2];
  /* Slots found: where the slot is (for ordering) and which home it points at. */
  int64_t slot_at[MAX_HOMES], slot_home[MAX_HOMES];
  bool slot_indexed[MAX_HOMES];
  size_t slots;
  bool finished, unknown;
  uint64_t first_call; /* target of the first direct call or jmp */
};

static bool frame_base(x86_reg reg) { return reg == X86_REG_RBP || reg == X86_REG_RSP; }

static uint32_t home_size_at(const struct analysis *a, int64_t disp) {
  for (size_t i = a->home_count; i-- > 0;)
    if (a->home_disp[i] == disp) return a->home_size[i];
  return 0;
}

static void add_slot(struct analysis *a, int64_t at, int64_t home, bool indexed) {
  if (a->slots == MAX_HOMES) {
    a->unknown = true;
    return;
  }
  a->slot_at[a->slots] = at;
  a->slot_home[a->slots] = home;
  a->slot_indexed[a->slots++] = indexed;
}

static bool is_move(unsigned id) {
  return id == X86_INS_MOV || id == X86_INS_MOVSS || id == X86_INS_MOVSD || id == X86_INS_MOVQ ||
         id == X86_INS_MOVD || id == X86_INS_MOVAPS || id == X86_INS_MOVUPS ||
         id == X86_INS_MOVDQA || id == X86_INS_MOVDQU;
}

/* Process one instruction; false stops the scan. */
static bool step(struct analysis *a, const cs_insn *insn) {
  const cs_x86 *x = &insn->detail->x86;
  const cs_x86_op *op0 = &x->operands[0], *op1 = &x->operands[1];
  if (insn->id == X86_INS_RET) return false;
  if (insn->id == X86_INS_CALL || insn->id == X86_INS_JMP) {
    if (!a->first_call && x->op_count == 1 && op0->type == X86_OP_IMM)
      a->first_call = (uint64_t)op0->imm;
    if (a->slots && insn->id == X86_INS_CALL && !a->unknown) {
      a->finished = true; /* the slots come before the stub's first runtime call */
      return false;
    }
    if (insn->id == X86_INS_CALL) a->unknown = a->slots > 0; /* e.g. __cudaAddressOf */
    a->reg_valid[X86_REG_RAX][0] = false;
    return insn->id == X86_INS_CALL || a->slots > 0; /* a tail jump: follow it instead */
  }
  if (x->op_count != 2) goto clobber;
  if (insn->id == X86_INS_LEA && op0->type == X86_OP_REG && op0->reg < X86_REG_ENDING) {
    if (op1->mem.base == X86_REG_RIP &&
        (uint64_t)(insn->address + insn->size + op1->mem.disp) ==
            (uint64_t)(uintptr_t)a->host_fun) {
      a->finished = a->slots > 0; /* the stub takes its kernel's address after the slots */
      return !a->finished;
    }
    a->reg_valid[op0->reg][0] = frame_base(op1->mem.base) && op1->mem.index == X86_REG_INVALID;
    a->reg_disp[op0->reg][0] = op1->mem.disp;
    return true;
  }
  if (insn->id == X86_INS_MOV && op0->type == X86_OP_REG && op1->type == X86_OP_REG &&
      op0->reg < X86_REG_ENDING && op1->reg < X86_REG_ENDING) {
    bool base = frame_base(op1->reg); /* mov rax, rsp: the address of the home at 0 */
    a->reg_valid[op0->reg][0] = base || a->reg_valid[op1->reg][0];
    a->reg_disp[op0->reg][0] = base ? 0 : a->reg_disp[op1->reg][0];
    a->reg_valid[op0->reg][1] = false;
    return true;
  }
  if ((insn->id == X86_INS_MOVQ || insn->id == X86_INS_MOVD) && op0->type == X86_OP_REG &&
      op1->type == X86_OP_REG && op0->reg < X86_REG_ENDING && op1->reg < X86_REG_ENDING) {
    bool base = frame_base(op1->reg); /* movq xmm0, rsp */
    a->reg_valid[op0->reg][0] = (base || a->reg_valid[op1->reg][0]) && op0->size == 16;
    a->reg_disp[op0->reg][0] = base ? 0 : a->reg_disp[op1->reg][0];
    a->reg_valid[op0->reg][1] = false;
    return true;
  }
  if (insn->id == X86_INS_PUNPCKLQDQ && op0->type == X86_OP_REG && op1->type == X86_OP_REG &&
      op0->reg < X86_REG_ENDING && op1->reg < X86_REG_ENDING) {
    a->reg_valid[op0->reg][1] = a->reg_valid[op1->reg][0];
    a->reg_disp[op0->reg][1] = a->reg_disp[op1->reg][0];
    return true;
  }
  if (is_move(insn->id) && op0->type == X86_OP_MEM && frame_base(op0->mem.base)) {
    bool indexed = op0->mem.index != X86_REG_INVALID;
    if (op1->type == X86_OP_REG && op1->reg < X86_REG_ENDING) {
      const bool *valid = a->reg_valid[op1->reg];
      const int64_t *disp = a->reg_disp[op1->reg];
      if (op0->size == 8 && valid[0] && (!indexed || op0->mem.scale == 8)) {
        add_slot(a, op0->mem.disp, disp[0], indexed);
        return true;
      }
      if (op0->size == 16 && valid[0] && valid[1] && !indexed) {
        add_slot(a, op0->mem.disp, disp[0], false);
        add_slot(a, op0->mem.disp + 8, disp[1], false);
        return true;
      }
      if (indexed && op0->size == 8 && op0->mem.scale == 8) {
        a->unknown = true; /* a slot whose value we cannot follow */
        return true;
      }
    }
    if (!indexed && a->home_count < MAX_HOMES && op0->size) {
      a->home_disp[a->home_count] = op0->mem.disp;
      a->home_size[a->home_count++] = op0->size;
    }
    return true;
  }
clobber:
  /* Any other write to a register ends what we knew about it. */
  if (x->op_count >= 1 && op0->type == X86_OP_REG && op0->reg < X86_REG_ENDING)
    a->reg_valid[op0->reg][0] = a->reg_valid[op0->reg][1] = false;
  return true;
}

/* Turn the slots into sizes, in array order; false if any slot cannot be sized or the array
 * has holes (a slot filled from something we did not follow). */
static bool resolve(const struct analysis *a, uint32_t *sizes, size_t max) {
  size_t order[MAX_HOMES];
  for (size_t i = 0; i < a->slots; i++) { /* stable insertion sort by slot position */
    size_t k = i;
    while (k > 0 && !a->slot_indexed[i] && a->slot_at[order[k - 1]] > a->slot_at[i]) {
      order[k] = order[k - 1];
      k--;
    }
    order[k] = i;
  }
  for (size_t i = 0; i < a->slots; i++) {
    size_t s = order[i];
    if (!a->slot_indexed[s] && i > 0 && a->slot_at[s] != a->slot_at[order[i - 1]] + 8)
      return false;
    uint32_t size = home_size_at(a, a->slot_home[s]);
    if (!size) return false;
    /* A struct passed in registers is homed by several stores: extend over stores that start
     * where this one ends, unless another slot points there. */
    for (uint32_t more; (more = home_size_at(a, a->slot_home[s] + size)) != 0; size += more) {
      bool other = false;
      for (size_t k = 0; k < a->slots; k++) other |= a->slot_home[k] == a->slot_home[s] + size;
      if (other || size > KPARAM_MAX_PARAM_BYTES) break;
    }
    if (i < max) sizes[i] = size;
  }
  /* A store right after the last slot that is not a home means a slot we missed. */
  if (a->slots && !a->slot_indexed[order[a->slots - 1]]) {
    int64_t after = a->slot_at[order[a->slots - 1]] + 8, before = a->slot_at[order[0]] - 8;
    for (size_t i = 0; i < a->home_count; i++)
      if ((a->home_disp[i] == after || a->home_disp[i] == before) && a->home_size[i] == 8) {
        bool is_home = false;
        for (size_t k = 0; k < a->slots; k++) is_home |= a->slot_home[k] == a->home_disp[i];
        if (!is_home) return false;
      }
  }
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
  struct analysis *a = calloc(1, sizeof *a);
  if (!a) {
    cs_close(&handle);
    return -ENOMEM;
  }
  a->host_fun = host_fun;
  int rc = analyse(handle, host_fun, a);
  if (rc == 0 && !a->finished && a->first_call) { /* host_fun just calls the stub: follow it */
    const void *stub = (const void *)(uintptr_t)a->first_call;
    memset(a, 0, sizeof *a);
    a->host_fun = host_fun;
    rc = analyse(handle, stub, a);
  }
  cs_close(&handle);
  if (rc == 0 && (!a->finished || a->unknown || !resolve(a, sizes, max))) rc = -ENOENT;
  if (rc == 0) rc = (int)a->slots;
  free(a);
  return rc;
}
