"""Every rule module, imported explicitly so that registration is visible and checked.

Each import registers one rule class (see `devicelint.rule_base.register`). Keep one module
per rule, named after the rule.
"""

# DL0xx: engine
# DL1xx: tensors and modules off-device (placement issue)
# -- begin DL1xx --
# -- end DL1xx --
# DL2xx: data and model parallelism
# -- begin DL2xx --
# -- end DL2xx --
# DL3xx: mixed precision; DL4xx: host syncs and transfers
# -- begin DL3xx-DL4xx --
# -- end DL3xx-DL4xx --
# DL5xx: checkpoints and device identity
# DL6xx: runtime-only codes (documented here, reported by devicelint.runtime)
# -- begin DL6xx --
from devicelint.checks import (
    backward_inside_autocast,  # noqa: F401
    clip_before_unscale,  # noqa: F401
    collective_tensor_on_cpu,  # noqa: F401
    create_then_move,  # noqa: F401
    cuda_in_dataset,  # noqa: F401
    custom_to_override_broken,  # noqa: F401
    dataloader_without_workers,  # noqa: F401
    dataparallel_as_model_parallelism,  # noqa: F401
    dataparallel_attribute_without_module,  # noqa: F401
    dataparallel_model_not_on_first_device,  # noqa: F401
    dataparallel_prefer_ddp,  # noqa: F401
    ddp_device_setup,  # noqa: F401
    deprecated_amp_api,  # noqa: F401
    device_attribute_left_behind,  # noqa: F401
    device_compared_to_string_or_bare_type,  # noqa: F401
    device_flag_ignored,  # noqa: F401
    file_not_analysed,  # noqa: F401
    fp16_autocast_without_gradscaler,  # noqa: F401
    fp16_weights_without_loss_scaling,  # noqa: F401
    generator_on_wrong_device,  # noqa: F401
    global_default_device,  # noqa: F401
    gradscaler_bypassed,  # noqa: F401
    gradscaler_unscaled_twice,  # noqa: F401
    gradscaler_update_missing,  # noqa: F401
    gradscaler_updated_twice,  # noqa: F401
    hard_coded_cuda_in_module,  # noqa: F401
    host_argument_on_device,  # noqa: F401
    host_sync_in_training_loop,  # noqa: F401
    loss_weight_off_device,  # noqa: F401
    metric_object_on_cpu,  # noqa: F401
    model_input_not_moved,  # noqa: F401
    model_not_moved,  # noqa: F401
    model_parallel_activation_not_moved,  # noqa: F401
    non_blocking_without_pinned_memory,  # noqa: F401
    numpy_on_device_tensor,  # noqa: F401
    op_arguments_on_different_devices,  # noqa: F401
    optimizer_state_device,  # noqa: F401
    per_step_constant_copy,  # noqa: F401
    removed_parallel_api,  # noqa: F401
    runtime_host_sync_in_checked_region,  # noqa: F401
    runtime_mixed_device_op,  # noqa: F401
    runtime_module_in_plain_container,  # noqa: F401
    runtime_parameter_or_buffer_off_device,  # noqa: F401
    runtime_per_step_host_to_device_copy,  # noqa: F401
    runtime_unregistered_tensor_attribute,  # noqa: F401
    sampler_generator_under_cuda_default,  # noqa: F401
    submodules_in_plain_container,  # noqa: F401
    syntax_error,  # noqa: F401
    tensor_attribute_not_registered,  # noqa: F401
    tensor_created_off_device,  # noqa: F401
    tensor_move_discarded,  # noqa: F401
    torch_load_without_map_location,  # noqa: F401
    unused_noqa,  # noqa: F401
    wrapped_state_dict_prefix,  # noqa: F401
)
# -- end DL6xx --
