//===- K3Types.td - k3 state and weight types --------------*- tablegen -*-===//

#ifndef K3_DIALECT_K3_IR_K3TYPES_TD
#define K3_DIALECT_K3_IR_K3TYPES_TD

include "k3/Dialect/K3/IR/K3Attrs.td"
include "mlir/IR/AttrTypeBase.td"

class K3_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<K3_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def K3_KDAStateType : K3_Type<"KDAState", "kda_state"> {
  let summary = "KDA recurrent state of one sequence and layer (K3_SPEC §4.5)";
  let description = [{
    The delta-rule state: one `key_dim` x `value_dim` matrix per head, in the
    element type given (fp32 in K3) and the recorded layout: `key_first` is
    the spec's S ([H, K, V]); `value_first` is Sᵀ ([H, V, K]), the layout of
    the official code and FlashKDA. With d_k = d_v a layout mix-up is silent,
    so the layout is part of the type.

    ```mlir
    !k3.kda_state<heads = 96, key_dim = 128, value_dim = 128,
                  element_type = f32, layout = value_first>
    ```
  }];
  let parameters = (ins "int64_t":$heads, "int64_t":$key_dim,
                        "int64_t":$value_dim, "::mlir::Type":$element_type,
                        "::mlir::k3::KDAStateLayout":$layout);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of elements of the state (heads * key_dim * value_dim).
    int64_t getNumElements() const {
      return getHeads() * getKeyDim() * getValueDim();
    }
  }];
}

def K3_ConvStateType : K3_Type<"ConvState", "conv_state"> {
  let summary = "short-convolution tail of one stream (K3_SPEC §4.2)";
  let description = [{
    The last `width` raw (pre-convolution, pre-SiLU) inputs of a depthwise
    causal convolution of kernel `width + 1`, stored channel-major
    ([channels, width], oldest first). The spec's 4-slot fla state carries the
    same information: its oldest slot never reaches the next step.

    ```mlir
    !k3.conv_state<channels = 12288, width = 3, element_type = bf16>
    ```
  }];
  let parameters = (ins "int64_t":$channels, "int64_t":$width,
                        "::mlir::Type":$element_type);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def K3_MLACacheType : K3_Type<"MLACache", "mla_cache"> {
  let summary = "paged latent KV cache of one sequence and MLA layer (K3_SPEC §5.3)";
  let description = [{
    Per token: the normalised latent c (`latent_dim`, 512 in K3) followed by
    the shared unrotated key part k_r (`rope_dim`, 64), stored in pages of
    `page_size` tokens. The length is a run-time property.

    ```mlir
    !k3.mla_cache<latent_dim = 512, rope_dim = 64, element_type = bf16,
                  page_size = 64>
    ```
  }];
  let parameters = (ins "int64_t":$latent_dim, "int64_t":$rope_dim,
                        "::mlir::Type":$element_type, "int64_t":$page_size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Values stored per token (latent_dim + rope_dim).
    int64_t getTokenWidth() const { return getLatentDim() + getRopeDim(); }
  }];
}

def K3_MXFP4Type : K3_Type<"MXFP4", "mxfp4"> {
  let summary = "a weight in OCP MXFP4: E2M1 elements, one E8M0 scale per 32 (K3_SPEC §7)";
  let description = [{
    The logical shape of an MXFP4 weight (for an expert stack
    [experts, N, K]). It is stored as `weight_packed` (u8 [.., N, K/2], the
    element of even k in the low nibble) and `weight_scale` (u8 [.., N, K/32],
    E8M0 biased exponents). The reduction (last) dimension must be a multiple
    of the 32-element scale group.

    ```mlir
    !k3.mxfp4<896x3072x3584>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Elements that share one E8M0 scale (OCP MX v1.0).
    static constexpr int64_t kGroupSize = 32;
    int64_t getRank() const { return getShape().size(); }
    /// Number of logical (4-bit) elements.
    int64_t getNumElements() const;
  }];
}

def K3_StateType : AnyTypeOf<[K3_KDAStateType, K3_ConvStateType,
                              K3_MLACacheType]>;

#endif // K3_DIALECT_K3_IR_K3TYPES_TD
